"""Explanations and faithfulness of a Hugging Face sequence classifier (a tiny random BERT, nothing downloaded)."""

from __future__ import annotations

import pytest
import torch

from attnkit.attribution import MethodNotApplicable, applicable_methods, attribute, faithfulness
from attnkit.attribution.hf import HFClassifier
from tests.support.threads import beside

transformers = pytest.importorskip("transformers")

IDS = torch.tensor([[5, 6, 7, 8, 0], [7, 8, 9, 5, 11], [4, 0, 0, 0, 0]])
LENGTHS = torch.tensor([4, 5, 1])


def _bert(impl: str = "sdpa") -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, num_labels=3)
    return transformers.BertForSequenceClassification._from_config(cfg, attn_implementation=impl).eval()


def _classifier(impl: str = "sdpa") -> HFClassifier:
    return HFClassifier(_bert(impl), cls_token_id=2, sep_token_id=3)


def _eager_attentions(ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The eager model's logits and output_attentions on ``[CLS] tokens [SEP]``, by hand."""
    seq, keep = _classifier().sequence(ids, lengths)
    out = _bert("eager")(input_ids=seq, attention_mask=keep, output_attentions=True)
    return out.logits, list(out.attentions)


def test_the_methods_that_apply_and_a_named_error_for_the_others() -> None:
    model = _classifier()
    assert applicable_methods(model) == ("attention", "rollout", "grad_input", "integrated_gradients", "chefer")
    assert applicable_methods(model.model) == applicable_methods(model)  # the bare model, read as it is
    with pytest.raises(MethodNotApplicable, match=r"'contributions' does not apply to HFClassifier.*the methods "
                                                  r"that do: attention, rollout, grad_input, integrated_gradients"):
        attribute(model, IDS, LENGTHS, "contributions")
    with pytest.raises(MethodNotApplicable, match="attention_norm.*no attention pooling"):
        attribute(model, IDS, LENGTHS, "attention_norm")


def test_every_method_scores_the_real_tokens_only() -> None:
    model = _classifier()
    for method in applicable_methods(model):
        scores = attribute(model, IDS, LENGTHS, method, steps=4)
        assert scores.shape == (3, 5) and torch.isfinite(scores).all(), method
        assert scores[2, 1:].abs().max() == 0 and scores[0, 4] == 0, method
        assert scores[:2].abs().sum() > 0, method


def test_attention_is_the_cls_row_and_the_logits_are_the_models() -> None:
    logits, attentions = _eager_attentions(IDS, LENGTHS)
    model = _classifier()
    assert torch.allclose(model(IDS, LENGTHS), logits, atol=1e-5)
    expected = attentions[-1].mean(1)[:, 0, 1:6] * (torch.arange(5)[None] < LENGTHS[:, None])
    assert torch.allclose(attribute(model, IDS, LENGTHS, "attention"), expected, atol=1e-5)


def _relevance_by_hand(logits: torch.Tensor, attentions: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The predicted classes and ``R = I; R += mean_h (grad A . A)^+ R`` per layer, ``(B, S, S)``."""
    target = logits.argmax(-1)
    grads = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), attentions)
    s = attentions[0].shape[-1]
    relevance = torch.eye(s).expand(logits.shape[0], s, s)
    for a, g in zip(attentions, grads, strict=True):
        relevance = relevance + (g * a).clamp_min(0).mean(1) @ relevance
    return target, relevance.detach()


def test_chefer_relevance_equals_a_hand_computation_on_the_eager_model() -> None:
    """R = I; R += mean_h (grad A . A)^+ R per layer; the [CLS] row, on the eager model's own weights."""
    target, relevance = _relevance_by_hand(*_eager_attentions(IDS, LENGTHS))
    expected = relevance[:, 0, 1:6] * (torch.arange(5)[None] < LENGTHS[:, None])
    got = attribute(_classifier(), IDS, LENGTHS, "chefer", target=target)  # the SDPA model, captured
    assert expected.abs().sum() > 0 and torch.allclose(got, expected.detach(), atol=1e-5)


def test_gradient_x_input_on_the_token_embeddings() -> None:
    model = _classifier()
    seq, keep = model.sequence(IDS, LENGTHS)
    embeddings = model.model.get_input_embeddings()(seq).detach().requires_grad_(True)
    bert = model.model
    logits = bert(inputs_embeds=embeddings, attention_mask=keep).logits
    target = logits.argmax(-1)
    (grad,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), [embeddings])
    expected = (grad * embeddings).sum(-1)[:, 1:6] * (torch.arange(5)[None] < LENGTHS[:, None])
    assert torch.allclose(attribute(model, IDS, LENGTHS, "grad_input"), expected.detach(), atol=1e-5)


def test_faithfulness_of_every_method_beside_the_random_order() -> None:
    docs = [[5, 6, 7, 8], [7, 8, 9, 5, 11, 12], [4], [20, 21, 22]]
    result = faithfulness(_classifier(), docs, steps=4)
    assert set(result["methods"]) == {"attention", "rollout", "grad_input", "integrated_gradients", "chefer"}
    assert result["n"] == 4 and result["shown_first"] in result["methods"]


def test_plain_inference_in_another_thread_is_unchanged_while_one_explains() -> None:
    model = _classifier()
    with torch.no_grad():
        expected_logits = model(IDS, LENGTHS)
    target = expected_logits.argmax(-1)
    expected = attribute(model, IDS, LENGTHS, "chefer", target=target)
    scores, logits = beside(model.model.classifier,
                            lambda: attribute(model, IDS, LENGTHS, "chefer", target=target),
                            lambda: model(IDS, LENGTHS).detach())
    assert torch.allclose(scores, expected, atol=1e-6)
    assert torch.allclose(logits, expected_logits, atol=1e-6)


# A decoder-style classifier (GPT-2, Llama, Mistral...) reads each row's last non-pad token, not position 0.

PAD = 0


def _gpt2(impl: str = "sdpa", pad: int | None = PAD) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16, num_labels=3,
                                  pad_token_id=pad, bos_token_id=1, eos_token_id=1,
                                  initializer_range=0.5)  # large weights: attention far from uniform
    return transformers.GPT2ForSequenceClassification._from_config(cfg, attn_implementation=impl).eval()


def _gpt2_attentions() -> tuple[torch.Tensor, list[torch.Tensor]]:
    seq, keep = HFClassifier(_gpt2()).sequence(IDS, LENGTHS)
    out = _gpt2("eager")(input_ids=seq, attention_mask=keep, output_attentions=True)
    return out.logits, list(out.attentions)


def _last_rows(x: torch.Tensor) -> torch.Tensor:
    """``x[b, lengths[b] - 1, :T]`` per row, zero past the document: the last real token's row, by hand."""
    rows = x[torch.arange(3), LENGTHS - 1, :5]
    return rows * (torch.arange(5)[None] < LENGTHS[:, None])


def test_the_pooled_position_is_where_the_model_classifies_with_right_or_left_padding() -> None:
    gpt2 = _gpt2()
    model = HFClassifier(gpt2)
    assert model.pooled == "last" and _classifier().pooled == "first"
    seq, keep = model.sequence(IDS, LENGTHS)
    assert model.pooled_positions(seq).tolist() == [3, 4, 0]  # right padding: lengths - 1
    left = torch.tensor([[PAD, 5, 6, 7, 8], [7, 8, 9, 5, 11], [PAD, PAD, PAD, PAD, 4]])
    assert model.pooled_positions(left).tolist() == [4, 4, 4]
    assert _classifier().pooled_positions(seq).tolist() == [0, 0, 0]
    for ids, mask in ((seq, keep), (left, (left != PAD).long())):  # the head reads exactly those positions
        with torch.no_grad():
            hidden = gpt2.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = gpt2.score(hidden[torch.arange(3), model.pooled_positions(ids)])
            assert torch.allclose(pooled, gpt2(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
    alone = HFClassifier(_gpt2(pad=None))  # no pad id in the config: the last position, as transformers does
    assert alone.pooled_positions(seq).tolist() == [4, 4, 4]
    assert HFClassifier(gpt2, pooled="first").pooled_positions(seq).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"pooled must be one of \['first', 'last'\], got 'middle'"):
        HFClassifier(gpt2, pooled="middle")


def test_a_decoder_classifiers_attention_and_rollout_are_its_last_real_tokens_rows() -> None:
    logits, attentions = _gpt2_attentions()
    model = HFClassifier(_gpt2())
    assert torch.allclose(model(IDS, LENGTHS), logits, atol=1e-5)
    last = attentions[-1].mean(1)  # (B, S, S)
    expected = _last_rows(last)
    got = attribute(model, IDS, LENGTHS, "attention")
    assert torch.allclose(got, expected, atol=1e-5)
    first = last[:, 0, :5] * (torch.arange(5)[None] < LENGTHS[:, None])  # what position 0 would have given
    assert (got[:2] - first[:2]).abs().max() > 0.1
    eye = torch.eye(last.shape[-1])
    flow = eye.expand_as(last)
    for a in attentions:
        flow = (0.5 * a.mean(1) + 0.5 * eye) @ flow  # rows sum to 1: (W + I) / 2
    assert torch.allclose(attribute(model, IDS, LENGTHS, "rollout"), _last_rows(flow), atol=1e-5)


def test_a_decoder_classifiers_chefer_relevance_starts_from_its_last_real_token() -> None:
    target, relevance = _relevance_by_hand(*_gpt2_attentions())
    expected = _last_rows(relevance)
    got = attribute(HFClassifier(_gpt2()), IDS, LENGTHS, "chefer", target=target)
    assert expected.abs().sum() > 0 and torch.allclose(got, expected, atol=1e-5)
    assert (got[:2] - relevance[:2, 0, :5]).abs().max() > 0.1  # position 0's row is another one
