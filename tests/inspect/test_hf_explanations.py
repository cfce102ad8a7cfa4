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


def test_chefer_relevance_equals_a_hand_computation_on_the_eager_model() -> None:
    """R = I; R += mean_h (grad A . A)^+ R per layer; the [CLS] row, on the eager model's own weights."""
    logits, attentions = _eager_attentions(IDS, LENGTHS)
    target = logits.argmax(-1)
    grads = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), attentions)
    s = attentions[0].shape[-1]
    relevance = torch.eye(s).expand(3, s, s)
    for a, g in zip(attentions, grads, strict=True):
        relevance = relevance + (g * a).clamp_min(0).mean(1) @ relevance
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
