"""Small ``transformers`` architectures for the model lane, built offline from their config classes.

Nothing is downloaded: every model is built from its config class with small sizes, then every
parameter is re-drawn from one seeded generator (:func:`seed_weights`), so every process builds
bit-identical weights. ``transformers`` is an optional extra (``pip install .[models]``); it is
imported lazily, inside the builders, so importing this module costs nothing when the lane is not
run.

Each :class:`ModelSpec` names the architecture, what it exercises (attention variant, positions,
norm) and its kind:

- ``decoder``: a causal LM; the lane runs prefill, one decode step against a static KV cache, and
  greedy ``generate()``;
- ``encoder``, ``vision``, ``audio``, ``ssm`` (a state-space language model, whose recurrent cache
  is not a KV cache): one forward;
- ``seq2seq``: one forward of encoder and decoder with teacher forcing.

Every MoE model is in the lane twice. ``<name>`` routes with ``experts_implementation="batched_mm"``:
every token's experts are gathered and multiplied with batched matmuls, so shapes are static and
nothing breaks. ``<name>_default_experts`` is the same model with the library's default, what a
user gets: ``grouped_mm``, which sorts the tokens by expert, counts them with ``histc`` and, on a
CPU in float32 under Dynamo, multiplies through the ``transformers::grouped_mm_fallback`` custom op
(``torch.nn.functional.grouped_mm`` in bfloat16); a backend breaks the graph at the ops it cannot
compile, and the report names them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from neuron_fixtures.models import seeded

SEED = 1234
VOCAB = 128
PROMPT_LEN = 8
NEW_TOKENS = 8
MAX_CACHE_LEN = 32  # prompt + generated tokens fit; a static cache keeps decode shapes fixed


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # decoder | encoder | vision | audio | ssm | seq2seq
    features: str
    build_fn: Callable[[], nn.Module] = field(repr=False)
    inputs_fn: Callable[[], dict[str, torch.Tensor]] = field(repr=False)

    def build(self, dtype: torch.dtype = torch.float32) -> nn.Module:
        model = seed_weights(self.build_fn(), SEED)
        return model.to(dtype).eval()

    def inputs(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        """The forward inputs (floating ones in ``dtype``), the same in every process."""
        return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in self.inputs_fn().items()}


def seed_weights(model: nn.Module, seed: int) -> nn.Module:
    """Re-draw every parameter from one generator: weights uniform in +-1/sqrt(fan_in) (activations
    and logits of order one, so greedy decoding has clear winners), norm scales near one, biases
    small. The fan-in of a matrix is its last dimension (linear and expert weights), of a
    convolution kernel everything but the output channels."""
    g = seeded(seed)
    conv_params = {
        id(p) for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd) for p in m.parameters(recurse=False)
    }
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dim() >= 2:
                fan_in = p[0].numel() if id(p) in conv_params else p.shape[-1]
                bound = 1.0 / math.sqrt(fan_in)
                p.copy_(torch.empty(p.shape).uniform_(-bound, bound, generator=g))
            elif "norm" in name or name.endswith("ln_f.weight") or "ln_" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return model


def _tokens(batch: int = 1, length: int = PROMPT_LEN, seed: int = 7) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=seeded(seed))


def _text_inputs() -> dict[str, torch.Tensor]:
    ids = _tokens(2, PROMPT_LEN)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _decoder_inputs() -> dict[str, torch.Tensor]:
    return {"input_ids": _tokens(1, PROMPT_LEN)}


def _image_inputs(size: int = 32, channels: int = 3) -> Callable[[], dict[str, torch.Tensor]]:
    return lambda: {"pixel_values": torch.randn(1, channels, size, size, generator=seeded(11))}


def _small(cls_name: str, **kw: Any):
    import transformers  # heavy optional dependency: imported when a model is built

    return getattr(transformers, cls_name)(**kw)


_DEC = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, tie_word_embeddings=False)


_MIXTRAL = dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **_DEC)
_QWEN2_MOE = dict(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                  shared_expert_intermediate_size=64, **_DEC)


def _causal(model_cls: str, config_cls: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config = _small(config_cls, **kw)
        return getattr(transformers, model_cls)(config)

    return build


def _whisper_encoder() -> nn.Module:
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
        decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=16, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1,
    )
    return WhisperEncoder(config)


def _t5() -> nn.Module:
    import transformers

    config = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


def _t5_inputs() -> dict[str, torch.Tensor]:
    ids = _tokens(2, PROMPT_LEN)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": _tokens(2, 4, seed=8)}


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("llama", "decoder", "GQA (4 query / 2 KV heads), rotary, RMSNorm, SwiGLU",
              _causal("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2, **_DEC), _decoder_inputs),
    ModelSpec("gpt2", "decoder", "MHA, learned absolute positions, LayerNorm, GELU",
              _causal("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False), _decoder_inputs),
    ModelSpec("mistral", "decoder", "GQA, rotary, sliding-window attention (window 4), RMSNorm",
              _causal("MistralForCausalLM", "MistralConfig", num_key_value_heads=2, sliding_window=4, **_DEC),
              _decoder_inputs),
    ModelSpec("bloom", "decoder", "MHA, ALiBi positions, LayerNorm (embedding norm too)",
              _causal("BloomForCausalLM", "BloomConfig", vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4,
                      tie_word_embeddings=False), _decoder_inputs),
    ModelSpec("gpt_neox", "decoder", "MHA, partial rotary (25%), LayerNorm, parallel residual",
              _causal("GPTNeoXForCausalLM", "GPTNeoXConfig", rotary_pct=0.25, **_DEC), _decoder_inputs),
    ModelSpec("mixtral", "decoder", "MoE: 4 experts, top-2 router (topk), GQA, rotary, RMSNorm; batched_mm experts",
              _causal("MixtralForCausalLM", "MixtralConfig", experts_implementation="batched_mm", **_MIXTRAL),
              _decoder_inputs),
    ModelSpec("mixtral_default_experts", "decoder", "Mixtral with the library's default experts (grouped_mm)",
              _causal("MixtralForCausalLM", "MixtralConfig", **_MIXTRAL), _decoder_inputs),
    ModelSpec("qwen2_moe", "decoder",
              "MoE: 4 experts top-2 plus a gated shared expert, GQA, rotary, QKV bias; batched_mm experts",
              _causal("Qwen2MoeForCausalLM", "Qwen2MoeConfig", experts_implementation="batched_mm", **_QWEN2_MOE),
              _decoder_inputs),
    ModelSpec("qwen2_moe_default_experts", "decoder", "Qwen2-MoE with the library's default experts (grouped_mm)",
              _causal("Qwen2MoeForCausalLM", "Qwen2MoeConfig", **_QWEN2_MOE), _decoder_inputs),
    ModelSpec("gemma2", "decoder",
              "soft-capped attention logits (tanh cap 50) and final logits, sliding-window layers alternating "
              "with global ones (window 4), GQA, pre- and post-norms",
              _causal("Gemma2ForCausalLM", "Gemma2Config", num_key_value_heads=2, head_dim=16, sliding_window=4,
                      query_pre_attn_scalar=16, attn_logit_softcapping=50.0, final_logit_softcapping=30.0, **_DEC),
              _decoder_inputs),
    ModelSpec("bert", "encoder", "bidirectional MHA, learned positions, token types, LayerNorm, pooler",
              _causal("BertModel", "BertConfig", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128, max_position_embeddings=64), _text_inputs),
    ModelSpec("vit", "vision", "patch embedding (conv), CLS token, pre-norm encoder",
              _causal("ViTModel", "ViTConfig", image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128), _image_inputs()),
    ModelSpec("resnet", "vision", "convolutions, batch norm (inference), max pool, residual stages",
              _causal("ResNetModel", "ResNetConfig", embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                      layer_type="basic"), _image_inputs()),
    ModelSpec("convnext", "vision", "depthwise 7x7 convolutions, channels-last LayerNorm, layer scale",
              _causal("ConvNextModel", "ConvNextConfig", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
              _image_inputs()),
    ModelSpec("t5", "seq2seq", "encoder-decoder, relative position buckets, RMSNorm-style T5 norm, cross-attention",
              _t5, _t5_inputs),
    ModelSpec("whisper_encoder", "audio", "conv front end over log-mel frames, sinusoidal positions, LayerNorm",
              _whisper_encoder, lambda: {"input_features": torch.randn(1, 16, 32, generator=seeded(12))}),
    ModelSpec("deberta_v2", "encoder",
              "disentangled relative-position attention (content-to-position and position-to-content, "
              "log buckets), no absolute positions",
              _causal("DebertaV2Model", "DebertaV2Config", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                      relative_attention=True, pos_att_type=["c2p", "p2c"], position_buckets=8,
                      max_relative_positions=16, position_biased_input=False), _text_inputs),
    ModelSpec("swin", "vision",
              "windowed attention (window 2) with shifted windows and a relative position bias table, "
              "patch merging between stages",
              _causal("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16, depths=[2, 2],
                      num_heads=[2, 4], window_size=2), _image_inputs()),
    ModelSpec("mamba", "ssm",
              "state-space blocks (selective scan, causal depthwise conv1d, no attention), RMSNorm",
              _causal("MambaModel", "MambaConfig", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                      state_size=8, expand=2, conv_kernel=4, use_cache=False), _decoder_inputs),
    ModelSpec("clip_vision", "vision", "CLIP vision tower: patch conv, class embedding, pre-LayerNorm, quick-GELU",
              _causal("CLIPVisionModel", "CLIPVisionConfig", image_size=32, patch_size=8, hidden_size=64,
                      num_hidden_layers=2, num_attention_heads=4, intermediate_size=128), _image_inputs()),
)

BY_NAME = {m.name: m for m in MODELS}


# --- decoders: prefill, a decode step on a static cache, greedy generate ------------------------


def static_cache(model: nn.Module, batch: int = 1, max_cache_len: int = MAX_CACHE_LEN):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def prefill_and_decode(forward: Callable, model: nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the prompt (prefill) and of one decode step that feeds back the greedy token,
    both through ``forward`` (the model's forward, compiled or not) on a fresh static cache."""
    cache = static_cache(model, batch=input_ids.shape[0])
    n = input_ids.shape[1]
    with torch.no_grad():
        out = forward(input_ids=input_ids, past_key_values=cache, cache_position=torch.arange(n), use_cache=True)
        prefill = out.logits
        nxt = prefill[:, -1:].argmax(-1)
        step = forward(input_ids=nxt, past_key_values=cache, cache_position=torch.tensor([n]), use_cache=True).logits
    return prefill, step


def greedy_generate(model: nn.Module, input_ids: torch.Tensor, forward: Callable | None = None,
                    new_tokens: int = NEW_TOKENS) -> torch.Tensor:
    """``model.generate`` (greedy, static cache) with ``forward`` standing in for the model's
    forward; the library's own auto-compile is off, so only ``forward`` compiles."""
    original = model.forward
    if forward is not None:
        model.forward = forward
    try:
        with torch.no_grad():
            return model.generate(
                input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                cache_implementation="static", disable_compile=True, pad_token_id=0,
                attention_mask=torch.ones_like(input_ids),
            )
    finally:
        model.forward = original
