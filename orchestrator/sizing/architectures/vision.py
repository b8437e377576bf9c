"""Vision families: ViT, ResNet, ConvNeXt, Swin, and the CLIP/SigLIP towers."""

from __future__ import annotations

from typing import Any

from orchestrator.sizing.architectures.cnn import ConvNeXt, ResNet, ResNetStage
from orchestrator.sizing.architectures.config import (
    cfg_activation,
    cfg_float,
    cfg_int,
    head_kind,
    num_labels,
    positive,
)
from orchestrator.sizing.architectures.shapes import (
    Architecture,
    ConfigError,
    Embedding,
    Head,
    Stack,
    WeightGroup,
    linear,
    norm,
)

# ----------------------------------------------------------------------------- ViT


def _vision_encoder_stack(
    cfg: dict[str, Any], layers: int, hidden: int, heads: int, inter: int, **extra: Any
) -> Stack:
    """A ViT-style encoder stack (ViT, and each Swin stage): pre-LN, GELU MLP, full heads,
    LoRA on q and v; `extra` holds what differs (final norm, fp32 softmax, windows)."""
    return Stack(
        role="encoder",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=inter,
        activation=cfg_activation(cfg, "hidden_act", default="gelu"),
        gated=False,
        norm="layernorm",
        prenorm=True,
        causal=False,
        attn_dropout=cfg_float(cfg, "attention_probs_dropout_prob"),
        hidden_dropout=cfg_float(cfg, "hidden_dropout_prob"),
        lora_targets=((hidden, hidden), (hidden, hidden)),
        **extra,
    )


def build_vit(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, "vit")
    h = positive("hidden_size", cfg_int(cfg, "hidden_size"))
    layers = positive("num_hidden_layers", cfg_int(cfg, "num_hidden_layers"))
    heads = positive("num_attention_heads", cfg_int(cfg, "num_attention_heads"))
    inter = positive("intermediate_size", cfg_int(cfg, "intermediate_size"))
    image = positive("image_size", cfg_int(cfg, "image_size", default=224))
    patch = positive("patch_size", cfg_int(cfg, "patch_size", default=16))
    channels = positive("num_channels", cfg_int(cfg, "num_channels", default=3))
    if h % heads:
        raise ConfigError(f"hidden size {h} is not divisible by {heads} heads")
    bias = bool(cfg.get("qkv_bias", True))
    tokens = (image // patch) ** 2 + 1
    weights: list[WeightGroup] = []
    weights += linear("patch_embeddings", channels * patch * patch, h)
    weights.append(WeightGroup("cls_token", (h,)))
    weights.append(WeightGroup("position_embeddings", (tokens, h)))
    weights += norm("layernorm_before_after", h, 2 * layers)
    weights += linear("qkv", h, h, 3 * layers, bias=bias)
    weights += linear("attention.output", h, h, layers)
    weights += linear("intermediate", h, inter, layers)
    weights += linear("output", inter, h, layers)
    weights += norm("layernorm", h)
    labels = num_labels(cfg)
    if kind == "image-classification":
        weights += linear("classifier", h, labels)
        head = Head(kind, labels=labels, pooled=True)
    else:
        weights += linear("pooler", h, h)
        head = Head("none")
    stack = _vision_encoder_stack(cfg, layers, h, heads, inter, final_norm=True)
    return Architecture(
        name=name,
        family="vit",
        kind="vit",
        weights=tuple(weights),
        stacks=(stack,),
        embedding=None,
        head=head,
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )


# -------------------------------------------------------------------------- ResNet


def build_resnet(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    _, notes = head_kind(cfg, "resnet")
    channels = positive("num_channels", cfg_int(cfg, "num_channels", default=3))
    stem = positive("embedding_size", cfg_int(cfg, "embedding_size", default=64))
    sizes = cfg.get("hidden_sizes") or [256, 512, 1024, 2048]
    depths = cfg.get("depths") or [3, 4, 6, 3]
    if not all(isinstance(x, int) and x > 0 for x in [*sizes, *depths]):
        raise ConfigError("hidden_sizes and depths must be lists of positive integers")
    if len(sizes) != len(depths):
        raise ConfigError("hidden_sizes and depths differ in length")
    layer_type = str(cfg.get("layer_type", "bottleneck"))
    if layer_type not in ("bottleneck", "basic"):
        raise ConfigError(f"unsupported layer_type {layer_type!r}")
    first_stride = 2 if cfg.get("downsample_in_first_stage", False) else 1
    stages = []
    in_ch = stem
    for i, (out_ch, depth) in enumerate(zip(sizes, depths, strict=True)):
        stages.append(ResNetStage(depth, in_ch, out_ch, first_stride if i == 0 else 2))
        in_ch = out_ch
    labels = num_labels(cfg)

    def conv(cin: int, cout: int, k: int) -> list[WeightGroup]:
        return [
            WeightGroup(f"conv{k}x{k}", (cout, cin, k, k), matmul=True),
            WeightGroup("bn", (cout,), 2),
        ]

    weights: list[WeightGroup] = conv(channels, stem, 7)
    for stage in stages:
        for j in range(stage.depth):
            cin = stage.in_channels if j == 0 else stage.out_channels
            stride = stage.stride if j == 0 else 1
            cout = stage.out_channels
            if cin != cout or stride != 1:
                weights += conv(cin, cout, 1)  # shortcut
            if layer_type == "bottleneck":
                r = cout // 4
                weights += conv(cin, r, 1) + conv(r, r, 3) + conv(r, cout, 1)
            else:
                weights += conv(cin, cout, 3) + conv(cout, cout, 3)
    weights += linear("classifier", sizes[-1], labels)
    return Architecture(
        name=name,
        family="resnet",
        kind="cnn",
        weights=tuple(weights),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=224,
        channels=channels,
        resnet=ResNet(channels, stem, layer_type, tuple(stages), labels),
        sdpa=False,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------ ConvNeXt


def build_convnext(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    _, notes = head_kind(cfg, "convnext")
    channels = positive("num_channels", cfg_int(cfg, "num_channels", default=3))
    patch = positive("patch_size", cfg_int(cfg, "patch_size", default=4))
    widths = tuple(cfg.get("hidden_sizes") or [96, 192, 384, 768])
    depths = tuple(cfg.get("depths") or [3, 3, 9, 3])
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in widths + depths):
        raise ConfigError("hidden_sizes and depths must be lists of positive integers")
    if len(widths) != len(depths):
        raise ConfigError("hidden_sizes and depths differ in length")
    labels = num_labels(cfg)
    scale = cfg_float(cfg, "layer_scale_init_value", default=1e-6) > 0
    weights = [WeightGroup("patch_embeddings", (widths[0], channels, patch, patch), matmul=True)]
    weights.append(WeightGroup("patch_embeddings.bias", (widths[0],)))
    weights += norm("embeddings.layernorm", widths[0])
    for i, (width, depth) in enumerate(zip(widths, depths, strict=True)):
        if i:  # downsampling: LayerNorm, then a 2x2 stride-2 conv
            weights += norm(f"stage{i}.downsample.norm", widths[i - 1])
            weights.append(
                WeightGroup(f"stage{i}.downsample", (width, widths[i - 1], 2, 2), 1, True)
            )
            weights.append(WeightGroup(f"stage{i}.downsample.bias", (width,)))
        weights.append(WeightGroup(f"stage{i}.dwconv", (width, 1, 7, 7), depth, matmul=True))
        weights.append(WeightGroup(f"stage{i}.dwconv.bias", (width,), depth))
        weights += norm(f"stage{i}.layernorm", width, depth)
        weights += linear(f"stage{i}.pwconv1", width, 4 * width, depth)
        weights += linear(f"stage{i}.pwconv2", 4 * width, width, depth)
        if scale:
            weights.append(WeightGroup(f"stage{i}.layer_scale", (width,), depth))
    weights += norm("layernorm", widths[-1])
    weights += linear("classifier", widths[-1], labels)
    return Architecture(
        name=name,
        family="convnext",
        kind="cnn",
        weights=tuple(weights),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=cfg_int(cfg, "image_size", default=224),
        channels=channels,
        convnext=ConvNeXt(channels, patch, widths, depths, labels),
        sdpa=False,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- Swin


def build_swin(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """Swin: a 4x4 patch stem + LayerNorm, stages of pre-LN blocks with (shifted) window
    attention and a relative-position bias table per block, patch merging (LayerNorm over 4C,
    a linear to 2C) between stages, a final LayerNorm, average pooling and a classifier. One
    Stack per stage, whose `window` is the tokens per attention window."""
    _, notes = head_kind(cfg, "swin")
    embed = positive("embed_dim", cfg_int(cfg, "embed_dim", default=96))
    depths = tuple(cfg.get("depths") or [2, 2, 6, 2])
    heads = tuple(cfg.get("num_heads") or [3, 6, 12, 24])
    if len(depths) != len(heads) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in depths + heads
    ):
        raise ConfigError("depths and num_heads must be equal-length lists of positive integers")
    window = positive("window_size", cfg_int(cfg, "window_size", default=7))
    patch = positive("patch_size", cfg_int(cfg, "patch_size", default=4))
    image = positive("image_size", cfg_int(cfg, "image_size", default=224))
    channels = positive("num_channels", cfg_int(cfg, "num_channels", default=3))
    ratio = cfg_float(cfg, "mlp_ratio", default=4.0)
    bias = bool(cfg.get("qkv_bias", True))
    labels = num_labels(cfg)
    weights = [WeightGroup("patch_embeddings", (embed, channels, patch, patch), matmul=True)]
    weights.append(WeightGroup("patch_embeddings.bias", (embed,)))
    weights += norm("embeddings.norm", embed)
    stacks = []
    res = image // patch
    for i, (depth, n) in enumerate(zip(depths, heads, strict=True)):
        c = embed * 2**i
        if c % n:
            raise ConfigError(f"stage {i} width {c} is not divisible by {n} heads")
        inter = int(ratio * c)
        win = min(window, res)
        weights += norm(f"stage{i}.layernorms", c, 2 * depth)
        weights += linear(f"stage{i}.qkv", c, c, 3 * depth, bias=bias)
        weights += linear(f"stage{i}.o_proj", c, c, depth)
        weights.append(
            WeightGroup(f"stage{i}.relative_position_bias", ((2 * win - 1) ** 2, n), depth)
        )
        weights += linear(f"stage{i}.fc1", c, inter, depth) + linear(
            f"stage{i}.fc2", inter, c, depth
        )
        if i < len(depths) - 1:  # patch merging
            weights += norm(f"stage{i}.downsample.norm", 4 * c)
            weights += linear(f"stage{i}.downsample.reduction", 4 * c, 2 * c, bias=False)
        stacks.append(
            _vision_encoder_stack(cfg, depth, c, n, inter, softmax_fp32=True, window=win * win)
        )
        res = -(-res // 2)
    last = embed * 2 ** (len(depths) - 1)
    weights += norm("layernorm", last)
    weights += linear("classifier", last, labels)
    return Architecture(
        name=name,
        family="swin",
        kind="swin",
        weights=tuple(weights),
        stacks=tuple(stacks),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- CLIP


def _clip_tower(cfg: dict[str, Any], role: str, family: str) -> tuple[dict[str, Any], Stack]:
    """One CLIP/SigLIP tower's sizes (text_config / vision_config) and its pre-LN Stack."""
    sub = cfg.get(f"{role}_config")
    if not isinstance(sub, dict):
        raise ConfigError(f"{family}: missing {role}_config")
    default = {"text": (512, 2048, 8), "vision": (768, 3072, 12)}[role]
    h = positive("hidden_size", cfg_int(sub, "hidden_size", default=default[0]))
    heads = positive("num_attention_heads", cfg_int(sub, "num_attention_heads", default=default[2]))
    if h % heads:
        raise ConfigError(f"hidden size {h} is not divisible by {heads} heads")
    act = "quick_gelu" if family == "clip" else "gelu_pytorch_tanh"
    stack = Stack(
        role="encoder",
        layers=positive("num_hidden_layers", cfg_int(sub, "num_hidden_layers", default=12)),
        hidden=h,
        heads=heads,
        kv_heads=heads,
        head_dim=h // heads,
        intermediate=positive(
            "intermediate_size", cfg_int(sub, "intermediate_size", default=default[1])
        ),
        activation=cfg_activation(sub, "hidden_act", default=act),
        gated=False,
        norm="layernorm",
        prenorm=True,
        causal=role == "text" and family == "clip",
        attn_dropout=cfg_float(sub, "attention_dropout"),
        softmax_fp32=True,
        # CLIP: a final LayerNorm over the text tokens; SigLIP: over both towers' tokens.
        final_norm=role == "text" or family == "siglip",
        lora_targets=((h, h), (h, h)),
    )
    return sub, stack


def _tower_weights(prefix: str, st: Stack) -> list[WeightGroup]:
    h = st.hidden
    weights = linear(f"{prefix}.qkvo", h, h, 4 * st.layers)
    weights += norm(f"{prefix}.layer_norms", h, 2 * st.layers + 1)  # + final / post LN
    weights += linear(f"{prefix}.fc1", h, st.intermediate, st.layers)
    return weights + linear(f"{prefix}.fc2", st.intermediate, h, st.layers)


def build_clip(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """CLIP: a causal text transformer (final LayerNorm, EOS pooling) and a ViT (class token,
    a LayerNorm before the layers and one on the pooled CLS row), each projected to
    `projection_dim`, trained with the contrastive loss on the batch's similarity matrix.
    SigLIP: a bidirectional text tower pooled at the last token with a linear head, a ViT
    without class token, a LayerNorm over all patches and an attention-pooling head (a probe
    query, multi-head attention, LayerNorm, MLP), trained with the pairwise sigmoid loss."""
    _, notes = head_kind(cfg, family)
    text_cfg, text = _clip_tower(cfg, "text", family)
    vision_cfg, vision = _clip_tower(cfg, "vision", family)
    vocab = positive("vocab_size", cfg_int(text_cfg, "vocab_size", default=49408))
    positions = cfg_int(text_cfg, "max_position_embeddings", default=77)
    image = positive("image_size", cfg_int(vision_cfg, "image_size", default=224))
    patch = positive("patch_size", cfg_int(vision_cfg, "patch_size", default=32))
    channels = positive("num_channels", cfg_int(vision_cfg, "num_channels", default=3))
    ht, hv = text.hidden, vision.hidden
    patches = (image // patch) ** 2
    weights = _tower_weights("text", text) + _tower_weights("vision", vision)
    weights += [WeightGroup("text.token_embedding", (vocab, ht))]
    weights += [WeightGroup("text.position_embedding", (positions, ht))]
    weights += [WeightGroup("vision.patch_embedding", (hv, channels, patch, patch), matmul=True)]
    if family == "clip":
        proj = positive("projection_dim", cfg_int(cfg, "projection_dim", default=512))
        weights += [WeightGroup("vision.class_embedding", (hv,))]
        weights += [WeightGroup("vision.position_embedding", (patches + 1, hv))]
        weights += norm("vision.pre_layrnorm", hv)
        weights += [WeightGroup("text_projection", (proj, ht), matmul=True)]
        weights += [WeightGroup("visual_projection", (proj, hv), matmul=True)]
        weights += [WeightGroup("logit_scale", (1,))]
    else:
        proj = cfg_int(text_cfg, "projection_size", default=ht)
        weights += [WeightGroup("vision.patch_embedding.bias", (hv,))]
        weights += [WeightGroup("vision.position_embedding", (patches, hv))]
        weights += linear("text.head", ht, proj)
        weights += [WeightGroup("vision.head.probe", (hv,))]
        weights += linear("vision.head.attention.in_proj", hv, 3 * hv)
        weights += linear("vision.head.attention.out_proj", hv, hv)
        weights += norm("vision.head.layernorm", hv)
        weights += linear("vision.head.fc1", hv, vision.intermediate)
        weights += linear("vision.head.fc2", vision.intermediate, hv)
        weights += [WeightGroup("logit_scale_and_bias", (1,), 2)]
    return Architecture(
        name=name,
        family=family,
        kind="dual-encoder",
        weights=tuple(weights),
        stacks=(vision, text),
        embedding=Embedding(vocab, ht, int_inputs=1),
        head=Head("contrastive", labels=proj, pooled=True),
        max_positions=positions,
        absolute_positions=True,
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )
