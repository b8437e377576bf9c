"""What each kind of model and each kind of task head means to the sizing formulas, as data.

The formulas (sizing/activations.py, flops.py, step_phases.py, resolve.py, ...) ask an
`Architecture` for its `traits` (a `Kind`) and a `Head` for its `traits` (a `HeadKind`)
instead of comparing kind strings; per-kind formulas are looked up in tables keyed by the
kind name next to the formulas themselves. A new kind of model is one row here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Kind:
    """Facts about one `Architecture.kind`."""

    name: str
    transformer: bool = True  # attention stacks (every kind but the CNNs)
    image_input: bool = False  # sized by --image-size alone, trains on decoded images
    patch_tokens: bool = False  # one stack over image patches (+ CLS): ViT
    encoder_decoder: bool = False  # two stacks: source and target lengths (--target-seq)
    pooler: bool = False  # BERT-style pooler and dropout before a classifier
    llm: bool = False  # decoder-only language model: tokens/s and MFU are reported


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("encoder", pooler=True),
        Kind("decoder", llm=True),
        Kind("encoder-decoder", encoder_decoder=True),
        Kind("vit", image_input=True, patch_tokens=True),
        Kind("cnn", transformer=False, image_input=True),
        Kind("swin"),  # one stack per stage, a quarter of the tokens each
        Kind("dual-encoder"),  # CLIP / SigLIP: an image tower, then a text tower
    )
}


@dataclass(frozen=True, slots=True)
class HeadKind:
    """Facts about one `Head.kind`."""

    name: str
    vocab_loss: bool = False  # cross-entropy over the vocabulary (an fp32 log-softmax)
    upcast_logits: bool = False  # transformers' causal-LM loss upcasts the logits (.float())


HEAD_KINDS: dict[str, HeadKind] = {
    h.name: h
    for h in (
        HeadKind("causal-lm", vocab_loss=True, upcast_logits=True),
        HeadKind("seq2seq-lm", vocab_loss=True),
        HeadKind("masked-lm", vocab_loss=True),
        HeadKind("pretraining", vocab_loss=True),
        HeadKind("sequence-classification"),
        HeadKind("token-classification"),
        HeadKind("question-answering"),
        HeadKind("image-classification"),
        HeadKind("contrastive"),
        HeadKind("none"),
    )
}
