"""A model's training inputs on the meta device: the main input (token ids, pixels or mel
frames) and the labels its head's loss takes, by the head its class name ends in."""

from __future__ import annotations

from typing import Any

from orchestrator.sizing.trace.key import TraceKey

# Head suffixes of transformers model classes -> head kind.
LABELS = (
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForPreTraining", "pretraining"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
)


def head_of(model_class: str) -> str:
    """The head kind of a transformers model class name ("none": a bare model)."""
    return next((k for suffix, k in LABELS if model_class.endswith(suffix)), "none")


def first_int(value: Any) -> int:
    return int(value[0] if isinstance(value, list | tuple) else value)


def model_inputs(torch: Any, model: Any, key: TraceKey) -> dict[str, Any]:
    """The model's training inputs and labels for `key`'s shape, as meta tensors."""
    import inspect

    b, s = key.batch, key.seq
    config = model.config
    meta = {"device": "meta"}
    accepted = set(inspect.signature(model.forward).parameters)
    name = type(model).__name__
    head = head_of(name)
    main = getattr(model, "main_input_name", "input_ids")
    inputs: dict[str, Any] = {}
    float_dtype = next(model.parameters()).dtype
    if main == "pixel_values":
        size = key.image_size or first_int(getattr(config, "image_size", 224))
        channels = getattr(config, "num_channels", 3)
        inputs["pixel_values"] = torch.empty(b, channels, size, size, dtype=float_dtype, **meta)
    elif main == "input_features":  # speech encoders: mel frames, the config's length
        frames = 2 * getattr(config, "max_source_positions", 1500)
        bins = getattr(config, "num_mel_bins", 80)
        inputs["input_features"] = torch.empty(b, bins, frames, dtype=float_dtype, **meta)
    else:
        inputs["input_ids"] = torch.zeros(b, s, dtype=torch.long, **meta)
    target = key.target_seq or s
    long = {"dtype": torch.long, **meta}
    if head in ("causal-lm", "masked-lm", "token-classification"):
        inputs["labels"] = torch.zeros(b, s, **long)
    elif head == "seq2seq-lm":
        inputs["labels"] = torch.zeros(b, target, **long)
    elif head in ("sequence-classification", "image-classification"):
        inputs["labels"] = torch.zeros(b, **long)
    elif head == "question-answering":
        inputs["start_positions"] = torch.zeros(b, **long)
        inputs["end_positions"] = torch.zeros(b, **long)
    elif head == "pretraining":
        if "next_sentence_label" in accepted:
            inputs["labels"] = torch.zeros(b, s, **long)
            inputs["next_sentence_label"] = torch.zeros(b, **long)
        else:  # ELECTRA's discriminator: one label per token
            inputs["labels"] = torch.zeros(b, s, **long)
    if head == "none" and config.is_encoder_decoder and "decoder_input_ids" in accepted:
        inputs["decoder_input_ids"] = torch.zeros(b, target, **long)
    return {k: v for k, v in inputs.items() if k in accepted}


# ---- run
