"""The frozen T5 caption encoder, and the one class that reads and writes its folder (GameGen-X §3.3).

GameGen-X conditions its MSDiT on T5 text features read by cross-attention, with captions of at most
300 tokens so that its long structured captions fit (§3.3). Nothing can be downloaded here, so the
project pretrains its own small T5 on its own captions (`gamengen.train.text_encoder`) and then only
ever uses the encoder half, frozen. Only this module knows the folder's file names; only JSON and
safetensors are read (no pickles)::

    config.json, model.safetensors          the transformers T5EncoderModel (save_pretrained)
    tokenizer.json, tokenizer_config.json   the PreTrainedTokenizerFast (save_pretrained)
    gamengen_text.json                      {"format", "version", "max_length", "preset"}
    README.md                               the model card
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel
from transformers.utils import logging as hf_logging

from ..atomic import write_folder_atomic
from ..errors import UserError

FORMAT, VERSION = "gamengen-text-encoder", 1
META_FILE, CARD = "gamengen_text.json", "README.md"
MAX_LENGTH = 300  # tokens, </s> included (GameGen-X §3.3)

# T5's special tokens and their ids: pad 0 (also the decoder's start token), </s> 1, <unk> 2, then the
# sentinels that stand for the dropped spans in span corruption (Raffel et al. 2020, §3.1.4). T5 has
# 100; 32 is plenty, since 300 tokens at 15% noise in spans of mean 3 make about 15 spans.
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SENTINELS = tuple(f"<extra_id_{i}>" for i in range(32))
SPECIAL_TOKENS = (PAD, EOS, UNK, *SENTINELS)  # in id order


@dataclass(frozen=True)
class TextEncoderPreset:
    vocab_size: int  # the most the tokenizer may learn; a small corpus can give fewer
    d_model: int
    num_layers: int
    num_heads: int
    d_ff: int
    decoder_layers: int  # pretraining only: a thin decoder pushes the learning into the encoder

    def t5_config(self, vocab_size: int) -> T5Config:
        """The T5 for a tokenizer of ``vocab_size`` tokens (its real size, not the preset's maximum)."""
        return T5Config(vocab_size=vocab_size, d_model=self.d_model, d_kv=self.d_model // self.num_heads,
                        d_ff=self.d_ff, num_layers=self.num_layers, num_decoder_layers=self.decoder_layers,
                        num_heads=self.num_heads, feed_forward_proj="relu",
                        # T5 v1.1 pretrains without dropout; our runs are far too short to overfit.
                        dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


TEXT_ENCODER_PRESETS: dict[str, TextEncoderPreset] = {
    # For tests; 16 wide like MSDIT_PRESETS["tiny"]'s text_dim, so the two plug together.
    "tiny": TextEncoderPreset(vocab_size=300, d_model=16, num_layers=1, num_heads=2, d_ff=32, decoder_layers=1),
    # A 2-core CPU pretrains it in minutes; 256 wide like MSDIT_PRESETS["cpu"]'s text_dim. Measured with
    # a full 4,000-token vocabulary: 4,172,160 encoder parameters (1,024,000 of them the embedding),
    # 6,271,232 with the 2-layer pretraining decoder (its output layer is tied to the embedding).
    "cpu": TextEncoderPreset(vocab_size=4000, d_model=256, num_layers=4, num_heads=4, d_ff=1024, decoder_layers=2),
}


@contextmanager
def _quiet():
    """No transformers progress bars ("Loading weights", "Writing model shards") for a one-file folder,
    nor its load report on missing weights, which load() turns into one UserError line; the caller's
    settings come back afterwards."""
    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


class CaptionEncoder:
    """A tokenizer and a frozen T5 encoder: captions -> (B, L, D) features for cross-attention."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, model: T5EncoderModel, preset: str,
                 max_length: int = MAX_LENGTH):
        self.tokenizer, self.preset, self.max_length = tokenizer, preset, max_length
        # Frozen: GameGen-X trains the MSDiT against fixed text features; eval() is a no-op for our
        # dropout-free T5 but keeps it so for any config a folder may bring.
        self.model = model.eval().requires_grad_(False)

    @property
    def width(self) -> int:
        """D, the feature width (T5's d_model)."""
        return self.model.config.d_model

    @property
    def device(self) -> torch.device:
        return self.model.device

    def to(self, device: str | torch.device) -> CaptionEncoder:
        self.model.to(device)
        return self

    def encode(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """B captions -> hidden (B, L, D) float32 and mask (B, L) bool, True on real tokens.

        L is the longest caption's token count in this batch, </s> included; shorter captions are
        padded on the right and their padded rows are zero. Padding never changes a caption's real
        rows: T5's attention masks the pads out and its positions are relative. A blank caption, or
        one over ``max_length`` tokens, is a UserError: cutting it would silently change its meaning.
        """
        if isinstance(texts, str) or not texts:
            raise UserError("the text encoder needs a list of one or more prompts", "pass [prompt]")
        name = (lambda i: "the prompt") if len(texts) == 1 else (lambda i: f"prompt {i}")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise UserError(f"{name(i)} is empty", "write what should happen")
        # verbose=False: no transformers warning about the length; the check below says it in one line.
        batch = self.tokenizer(list(texts), padding="longest", return_tensors="pt", verbose=False)
        for i, n in enumerate(batch["attention_mask"].sum(1).tolist()):
            if n > self.max_length:
                raise UserError(f"{name(i)} is {n} tokens, the text encoder reads at most {self.max_length}",
                                "shorten it (every digit is a token)")
            if n < 2:  # only </s>: nothing survived the normalizer
                raise UserError(f"{name(i)} has no readable text", "write it in plain letters and digits")
        mask = batch["attention_mask"].to(self.device).bool()
        with torch.no_grad():
            out = self.model(input_ids=batch["input_ids"].to(self.device), attention_mask=mask.long())
        hidden = out.last_hidden_state.float()
        # Pad rows hold whatever T5 computed there; zero them so a caption's tensor is the same in any batch.
        return hidden * mask[..., None], mask

    def default_card(self) -> str:
        c = self.model.config
        params = sum(p.numel() for p in self.model.parameters())
        return (f"# gamengen text encoder ({self.preset} preset)\n\nThe encoder half of a small T5 "
                f"(d_model {c.d_model}, {c.num_layers} layers, {c.num_heads} heads, {c.vocab_size} tokens, "
                f"{params:,} parameters) pretrained with span corruption on game captions; frozen, it "
                f"turns a caption of at most {self.max_length} tokens into {c.d_model}-wide features "
                f"(GameGen-X §3.3).\n\nFiles: `config.json` + `model.safetensors` (transformers "
                f"T5EncoderModel), `tokenizer.json` + `tokenizer_config.json`, `{META_FILE}`.\n")

    def save(self, folder: str | Path, card: str | None = None) -> None:
        """Write the folder whole or not at all: into a temporary sibling, fsynced, then renamed in."""
        meta = {"format": FORMAT, "version": VERSION, "max_length": self.max_length, "preset": self.preset}

        def write(tmp: Path) -> None:
            # transformers 5 always writes safetensors (its safe_serialization switch is gone).
            with _quiet():
                self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            (tmp / CARD).write_text(card if card is not None else self.default_card())

        write_folder_atomic(folder, write)

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device = "cpu") -> CaptionEncoder:
        from safetensors import SafetensorError

        folder = Path(folder)
        fix = "pass a folder that the text encoder pretraining wrote, or pretrain it again"
        if not folder.is_dir():
            raise UserError(f"no text encoder folder at {folder}", fix)
        if not (folder / META_FILE).is_file():
            raise UserError(f"{folder} is not a text encoder folder ({META_FILE} missing)", fix)
        try:
            meta = json.loads((folder / META_FILE).read_text())
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{folder / META_FILE} is not valid JSON", fix) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise UserError(f"{folder} is not a text encoder folder ({META_FILE} is not {FORMAT})", fix)
        if meta.get("version") != VERSION:
            raise UserError(f"{folder} is a text encoder of version {meta.get('version')}, this gamengen reads "
                            f"version {VERSION}", "use the gamengen that wrote it, or pretrain it again")
        if not isinstance(meta.get("max_length"), int) or not 1 < meta["max_length"] <= MAX_LENGTH:
            raise UserError(f"{folder / META_FILE} has no valid max_length", fix)
        try:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
            with _quiet():
                model, info = T5EncoderModel.from_pretrained(folder, local_files_only=True, use_safetensors=True,
                                                             output_loading_info=True)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError, SafetensorError) as e:
            raise UserError(f"the text encoder in {folder} is damaged ({type(e).__name__}: {str(e)[:80]})",
                            fix) from None
        # from_pretrained only warns about weights it did not find and draws them at random instead.
        bad = [k for key in ("missing_keys", "unexpected_keys", "mismatched_keys") for k in info.get(key) or []]
        if bad:
            raise UserError(f"the text encoder in {folder} has wrong weights ({str(bad)[:80]})", fix)
        if [tokenizer.pad_token_id, tokenizer.eos_token_id] != [0, 1] or len(tokenizer) != model.config.vocab_size:
            raise UserError(f"the tokenizer in {folder} does not match its T5 encoder", fix)
        return cls(tokenizer, model, str(meta.get("preset", "?")), meta["max_length"]).to(device)
