"""The tiny model: built locally, deterministic, cached, and loaded through the same path as a hub model."""

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from kernelflow.tasks import build_messages, get_task
from kernelflow.train.config import LoraSettings, TinyModelConfig
from kernelflow.train.policy import load_policy
from kernelflow.train.tiny import build_tiny_model, build_tokenizer, hashed_settings, tiny_model_hash


def test_autotokenizer_gives_the_trained_tokenizers_ids(tiny_policy_config):
    path = build_tiny_model(tiny_policy_config.tiny, tiny_policy_config.cache_dir)
    auto = AutoTokenizer.from_pretrained(path)
    raw = PreTrainedTokenizerFast.from_pretrained(path)
    assert type(auto).__name__ == "Qwen2Tokenizer"  # transformers rebuilds it from vocab + merges
    for text in [
        "12 + 7 = 19",
        "def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n",
        "status: incorrect. max abs error 1.5e+00 — héllo 日本\r\n\tend",
        get_task("22_Tanh").source,
    ]:
        assert auto(text)["input_ids"] == raw(text)["input_ids"]
        assert auto.decode(auto(text)["input_ids"]) == text
    assert (auto.eos_token, auto.pad_token, auto.padding_side) == ("<|im_end|>", "<|endoftext|>", "left")


def test_chat_template_is_chatml(tiny_policy_config):
    tok = AutoTokenizer.from_pretrained(build_tiny_model(tiny_policy_config.tiny, tiny_policy_config.cache_dir))
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


def test_build_is_deterministic_and_cached(tmp_path):
    cfg = TinyModelConfig(num_layers=1, seed=3)
    a = build_tiny_model(cfg, tmp_path / "a")
    b = build_tiny_model(cfg, tmp_path / "b")
    assert a.name == b.name == f"tiny-{tiny_model_hash(cfg)[:16]}"
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    stamp = (a / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(cfg, tmp_path / "a") == a and (a / "model.safetensors").stat().st_mtime_ns == stamp
    assert build_tiny_model(TinyModelConfig(num_layers=1, seed=4), tmp_path / "a") != a
    assert json.loads((a / "kernelflow_tiny.json").read_text())["config"]["seed"] == 3


def test_build_dtype_draws_and_saves_in_that_dtype(tmp_path):
    """random_7b draws its weights in bf16 (a 7B shape in fp32 is ~30 GB of host RAM): the saved
    weights are bf16, the process's default dtype is left as it was, and the key differs from fp32's."""
    import pytest
    from safetensors import safe_open

    fp32 = TinyModelConfig(num_layers=1, seed=3)
    bf16 = TinyModelConfig(num_layers=1, seed=3, build_dtype="bfloat16")
    path = build_tiny_model(bf16, tmp_path)
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32
    assert tiny_model_hash(bf16) != tiny_model_hash(fp32)
    assert json.loads((path / "kernelflow_tiny.json").read_text())["built_on"] in ("cpu", "cuda")
    with pytest.raises(ValueError, match="build_dtype='int8'"):
        TinyModelConfig(build_dtype="int8")


def test_default_build_settings_keep_the_cache_key():
    """Models cached before build_device/build_dtype existed keep their key (the SFT policies carried to
    GPU hosts are found by it): the defaults are left out of the hashed settings."""
    assert tiny_model_hash(TinyModelConfig()) == tiny_model_hash(TinyModelConfig(build_device="cpu", build_dtype="float32"))
    assert not {"build_device", "build_dtype"} & set(hashed_settings(TinyModelConfig()))


def test_tokenizer_covers_the_prompt_compactly():
    tok = build_tokenizer(TinyModelConfig())
    text = build_messages(get_task("19_ReLU"))[1]["content"]
    assert len(tok(text)["input_ids"]) < len(text.encode()) / 2  # merges learnt from the project's text


def test_load_policy_round_trip(tiny_policy_config):
    policy = load_policy(tiny_policy_config, LoraSettings(r=4, alpha=8), seed=1)
    path = policy.base_id
    plain = AutoModelForCausalLM.from_pretrained(path)
    assert policy.base_revision is None
    assert policy.turn_end_id == policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert set(policy.eos_ids) == {policy.turn_end_id, policy.pad_id}
    counts = policy.parameter_counts()
    assert 0 < counts["trainable"] < counts["total"]
    names = [n for n, _ in policy.trainable_parameters()]
    assert names and all("lora_" in n for n in names)
    # the adapter starts as a no-op (LoRA B = 0): same logits as the plain model
    ids = torch.tensor([policy.tokenizer("def forward(self, x):")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(policy.model(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-6)


def test_lora_init_depends_on_seed_only(tiny_policy_config):
    lora = LoraSettings(r=4, alpha=8)
    torch.manual_seed(123)
    a = dict(load_policy(tiny_policy_config, lora, seed=5).trainable_parameters())
    torch.manual_seed(999)
    b = dict(load_policy(tiny_policy_config, lora, seed=5).trainable_parameters())
    c = dict(load_policy(tiny_policy_config, lora, seed=6).trainable_parameters())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_hub_sampling_defaults_do_not_leak_into_rollouts(tiny_policy_config, tmp_path):
    """A model dir whose generation_config.json carries Qwen-style defaults (here exaggerated)."""
    import shutil

    from kernelflow.train.config import PolicyConfig
    from kernelflow.train.generation import SamplingSettings, generate

    src = build_tiny_model(tiny_policy_config.tiny, tiny_policy_config.cache_dir)
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    gen = json.loads((dst / "generation_config.json").read_text())
    gen.update(repetition_penalty=50.0, top_k=1, top_p=0.1, temperature=0.01, do_sample=True, no_repeat_ngram_size=1)
    (dst / "generation_config.json").write_text(json.dumps(gen))
    policy = load_policy(PolicyConfig(source="local", model=str(dst), dtype="float32", device="cpu",
                                      gradient_checkpointing=False), LoraSettings(r=4, alpha=8), seed=0)
    gc = policy.model.generation_config
    assert gc.repetition_penalty in (None, 1.0) and gc.top_k in (None, 0, 50) and not gc.no_repeat_ngram_size
    # greedy generation equals a hand-written argmax loop over the policy's own logits
    prompt = policy.tokenizer("def forward(self, x):")["input_ids"]
    out = generate(policy, [prompt], SamplingSettings(max_new_tokens=10, do_sample=False)).completions[0]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(len(out.ids)):
            ids.append(int(policy.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert tuple(ids[len(prompt):]) == out.ids
