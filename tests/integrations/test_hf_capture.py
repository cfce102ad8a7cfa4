"""capture() on a model running attn_implementation="attnkit": exact maps, verify=True, packed rows, SigLIP2."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.inspect import capture  # noqa: E402
from attnkit.inspect.verify import TOLERANCE, tolerance  # noqa: E402
from tests.integrations.test_hf_backend import T, V, _model, on_the_interface, packed_on_the_backend  # noqa: E402


@pytest.mark.parametrize("name", ["bert", "distilbert", "llama", "mistral", "qwen2", "gemma2", "gpt2", "gpt_oss"])
def test_capture_on_the_backend_reads_eagers_maps(name):
    model = _model(name)
    on_the_interface(model)  # BERT, DistilBERT before transformers 5.0: refused by name
    ids = torch.randint(1, V, (2, T))
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, 8:] = 0
    model.set_attn_implementation("eager")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    model.set_attn_implementation("attnkit")
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with capture(model, verify=True) as cap:
            seen = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(plain, seen)
    assert not cap.missed and len(cap.weights) == len(want) == 2
    rows = mask.bool()[:, None, :, None]  # real queries (padded ones attend nothing on the backend)
    for got, ref in zip(cap.weights.values(), want, strict=True):
        assert got.shape == ref.shape
        assert float(((got - ref).abs() * rows).max()) < 1e-5
    assert all(d <= TOLERANCE for d in cap.verified.values()) and len(cap.verified) == 2


@pytest.mark.parametrize("impl", ["eager", "sdpa", "attnkit"])
def test_verify_passes_on_a_left_padded_gpt2_comparing_its_real_queries(impl):
    """Left padding: a padding query's row is zero or uniform in the capture and, in some releases' eager (4.54,
    5.0: GPT-2 applies its own causal mask after the padding mask), its causal keys; only real queries count."""
    model = _model("gpt2")
    ids = torch.randint(1, V, (2, T))
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    model.set_attn_implementation("eager")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    model.set_attn_implementation(impl)
    with torch.no_grad(), capture(model, verify=True) as cap:
        model(input_ids=ids, attention_mask=mask)
    assert len(cap.verified) == 2 and all(d <= TOLERANCE for d in cap.verified.values())
    real = mask.bool()[:, None, :, None]
    for got, ref in zip(cap.weights.values(), want, strict=True):
        assert float(((got - ref).abs() * real).max()) < 1e-5


def test_only_real_queries_are_compared_and_a_wrong_real_row_still_counts():
    """real_queries reads the call's mask (boolean or additive); map_difference skips the other rows only."""
    from attnkit.inspect.hf import real_queries
    from attnkit.inspect.verify import map_difference

    keep = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
    keep[..., :2, :] = False  # two padding queries
    keep[..., :, :2] = False
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    module = torch.nn.Module()
    for m in (keep, additive, additive.masked_fill(~keep, float("-inf"))):
        assert real_queries(module, m, {}, 4, 4).flatten().tolist() == [False, False, True, True]
    assert real_queries(module, None, {}, 4, 4) is None
    ours = torch.zeros(1, 1, 4, 4)
    ours[..., 2, 2], ours[..., 3, 2:] = 1.0, 0.5
    ref = ours.clone()
    ref[..., 0, 0], ref[..., 1, :2] = 1.0, 0.5  # eager's causal keys in the padding rows
    queries = real_queries(module, keep, {}, 4, 4)
    assert map_difference(ours, ref) == 1.0 and map_difference(ours, ref, queries) == 0.0
    ref[..., 3, 2:] = torch.tensor([0.25, 0.75])
    assert map_difference(ours, ref, queries) == 0.25


@pytest.mark.parametrize("name", ["bert", "modernbert", "llama"])
def test_capture_of_packed_rows_on_the_backend_keeps_each_document_alone(name):
    model, examples, batch = packed_on_the_backend(name)
    with torch.no_grad(), capture(model, verify=True) as cap:
        model(input_ids=batch["input_ids"], position_ids=batch["position_ids"])
    assert not cap.missed and len(cap.weights) == 2
    starts = [0, 5, 14, 21]
    model.set_attn_implementation("eager")
    for s, e in zip(starts, starts[1:], strict=False):
        with torch.no_grad():
            alone = model(input_ids=batch["input_ids"][:, s:e], output_attentions=True).attentions
        for got, ref in zip(cap.weights.values(), alone, strict=True):
            assert float((got[..., s:e, s:e] - ref).abs().max()) < 1e-5
            assert float(got[..., s:e, :].sum(-1).sub(1).abs().max()) < 1e-6  # nothing across documents


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_verify_in_half_precision_passes_on_the_backend_within_its_dtypes_tolerance(dtype):
    model = _model("llama").to(dtype)
    model.set_attn_implementation("attnkit")
    ids = torch.randint(1, V, (2, 64))
    with torch.no_grad(), capture(model, verify=True) as cap:
        model(input_ids=ids)
    assert len(cap.verified) == 2 and all(d <= tolerance(dtype) for d in cap.verified.values())
    assert tolerance(torch.bfloat16) == 4 * 2.0 ** -8 and tolerance(torch.float16) == 4 * 2.0 ** -11
    assert tolerance(torch.float32) == tolerance(torch.float64) == TOLERANCE == 1e-5


def _siglip2():
    torch.manual_seed(0)
    return transformers.Siglip2Model(transformers.Siglip2Config(
        text_config={"vocab_size": V, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "intermediate_size": 64, "max_position_embeddings": 16},
        vision_config={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "intermediate_size": 64, "num_channels": 3, "patch_size": 4, "num_patches": 16})).eval()


def test_siglip2_with_its_pooling_head_equals_eager_on_the_backend_and_is_captured():
    model = _siglip2()
    on_the_interface(model)  # before transformers 5.2: refused by name
    pixel_mask = torch.ones(2, 16, dtype=torch.long)
    pixel_mask[1, 10:] = 0  # the pooling head builds a (B, 1, 1, Tk) mask and repeats it as a tensor
    inputs = {"input_ids": torch.randint(1, V, (2, 8)), "pixel_values": torch.randn(2, 16, 48),
              "pixel_attention_mask": pixel_mask, "spatial_shapes": torch.tensor([[4, 4], [4, 4]])}
    logits, maps = {}, {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), capture(model, verify=True) as cap:
            logits[impl] = model(**inputs).logits_per_image
        assert not cap.missed
        maps[impl] = cap.weights
    assert float((logits["attnkit"] - logits["eager"]).abs().max()) < 1e-5
    assert maps["attnkit"].keys() == maps["eager"].keys() and len(maps["eager"]) == 5  # the pooling head's too
    for name, want in maps["eager"].items():
        assert float((maps["attnkit"][name] - want).abs().max()) < 1e-5, name


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_explanations_of_a_classifier_on_the_backend_equal_sdpas(family):
    from attnkit.attribution import applicable_methods, attribute
    from attnkit.attribution.hf import HFClassifier
    from tests.inspect.test_hf_explanations import IDS, LENGTHS, _bert, _gpt2

    build = _bert if family == "bert" else _gpt2
    on_the_interface(build())  # BERT before transformers 5.0: refused by name
    special = {"cls_token_id": 2, "sep_token_id": 3} if family == "bert" else {}
    models = {impl: HFClassifier(build(impl), **special) for impl in ("sdpa", "attnkit")}
    assert models["attnkit"].pooled == ("first" if family == "bert" else "last")
    methods = applicable_methods(models["attnkit"])
    assert {"attention", "rollout", "chefer"} <= set(methods)
    target = torch.zeros(3, dtype=torch.long)
    for method in methods:
        want = attribute(models["sdpa"], IDS, LENGTHS, method, steps=4, target=target)
        got = attribute(models["attnkit"], IDS, LENGTHS, method, steps=4, target=target)
        scale = max(1.0, float(want.abs().max()))  # gradients reach ~20: float32 sums in another order
        assert float((got - want).abs().max()) < 1e-5 * scale, method
