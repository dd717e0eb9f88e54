"""The locally built model presets have the shapes they claim (no model hub: nothing else checks them)."""

from __future__ import annotations

from flows.config import to_experiment_config
from tests.flows.conftest import compose_config


def qwen2_parameters(t) -> tuple[int, int]:
    """(all, outside the embeddings) parameters of a Qwen2ForCausalLM with `t`'s shape (QKV bias, RMSNorm)."""
    head_dim = t.hidden_size // t.num_heads
    kv = t.num_kv_heads * head_dim
    attention = t.hidden_size * (t.hidden_size + 2 * kv) + (t.hidden_size + 2 * kv) + t.hidden_size * t.hidden_size
    mlp = 3 * t.hidden_size * t.intermediate_size
    layer = attention + mlp + 2 * t.hidden_size  # two RMSNorm weights
    body = t.num_layers * layer + t.hidden_size  # the final norm
    embeddings = t.vocab_size * t.hidden_size * (1 if t.tie_word_embeddings else 2)
    return body + embeddings, body


def test_random_7b_is_shaped_like_the_pilots_base_model():
    policy = to_experiment_config(compose_config("experiment=pilot", "model=random_7b")).model
    assert policy.source == "tiny" and policy.dtype == "bfloat16"
    total, body = qwen2_parameters(policy.tiny)
    # Qwen2.5-Coder-7B-Instruct's model card: 7.61B parameters, 6.53B outside the embeddings
    assert round(total / 1e9, 2) == 7.62 and round(body / 1e9, 2) == 6.53, (total, body)
    assert (policy.tiny.num_heads, policy.tiny.num_kv_heads, policy.tiny.tie_word_embeddings) == (28, 4, False)


def test_random_05b_is_shaped_like_qwen25_05b():
    policy = to_experiment_config(compose_config("model=random_05b")).model
    total, body = qwen2_parameters(policy.tiny)
    assert round(total / 1e9, 2) == 0.49 and round(body / 1e9, 2) == 0.36, (total, body)  # its card: 0.49B, 0.36B
