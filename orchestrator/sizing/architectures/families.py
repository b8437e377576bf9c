"""Which `model_type`s orch models, and per-family facts: default heads, SDPA support,
learned absolute positions, activation functions."""

from __future__ import annotations

ENCODER_FAMILIES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "albert",
    "deberta-v2",
)
# Decoder-only LMs: the original six and those added for the families people fine-tune now.
LLM_FAMILIES = (
    "qwen3",
    "olmo2",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "falcon",
    "bloom",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
)
DECODER_FAMILIES = ("gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", *LLM_FAMILIES)
FAMILIES = (
    *ENCODER_FAMILIES,
    "modernbert",
    *DECODER_FAMILIES,
    *("t5", "bart", "mbart", "whisper", "vit", "resnet", "convnext", "swin", "clip", "siglip"),
)

# Head kinds (the `architectures` suffix decides which one a config gets).
HEADS = (
    "causal-lm",
    "masked-lm",
    "seq2seq-lm",
    "pretraining",  # BERT: masked LM + next-sentence; ELECTRA: replaced-token discriminator
    "sequence-classification",
    "token-classification",
    "question-answering",
    "image-classification",
    "contrastive",  # CLIP: image-text similarity over the batch
    "none",
)
HEAD_SUFFIXES = (
    ("LMHeadModel", "causal-lm"),
    ("ForCausalLM", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForPreTraining", "pretraining"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForImageClassification", "image-classification"),
    ("Model", "none"),
)
DEFAULT_HEAD = {
    "bert": "masked-lm",
    "roberta": "masked-lm",
    "xlm-roberta": "masked-lm",
    "modernbert": "masked-lm",
    "distilbert": "masked-lm",
    "albert": "masked-lm",
    "deberta-v2": "masked-lm",
    "electra": "pretraining",
    "gpt2": "causal-lm",
    "gpt_neox": "causal-lm",
    "opt": "causal-lm",
    "llama": "causal-lm",
    "mistral": "causal-lm",
    "qwen2": "causal-lm",
    **{f: "causal-lm" for f in LLM_FAMILIES},
    "t5": "seq2seq-lm",
    "bart": "seq2seq-lm",
    "mbart": "seq2seq-lm",
    "whisper": "seq2seq-lm",
    "vit": "image-classification",
    "resnet": "image-classification",
    "convnext": "image-classification",
    "swin": "image-classification",
    "clip": "contrastive",
    "siglip": "contrastive",
}
# Families whose transformers implementation has an SDPA/flash attention path.
SDPA_FAMILIES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "albert",
    "gpt2",
    "gpt_neox",
    "opt",
    "llama",
    "mistral",
    "qwen2",
    *LLM_FAMILIES,
    "vit",
}
# Families whose positions are learned absolute embeddings: a longer sequence cannot run.
ABSOLUTE_POSITION_FAMILIES = {
    *("bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert", "gpt2", "opt"),
    *("bart", "mbart"),
}
# Activation functions as `transformers` implements them, by how many tensors of the MLP
# width they save for backward: "gelu_new" is a Python tanh formula that saves four.
ACTIVATIONS = {
    *("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish"),
    "quick_gelu",  # CLIP: x * sigmoid(1.702 x), which saves x and the sigmoid
}
