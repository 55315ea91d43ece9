"""Pretrain the caption encoder: a tokenizer, then T5's span corruption on the captions.

GameGen-X reads its captions with a pretrained T5 (§3.3). We cannot download one, and game captions
are a small closed language (a fixed vocabulary of map names, actions and numbers), so a small T5
pretrained on the captions themselves with T5's own objective stands in for it: random spans of a
caption are replaced by sentinels and a thin decoder must write them back (Raffel et al. 2020,
§3.1.4), which forces the encoder to represent every part of the caption, numbers included.

Not resumable yet: a run is short (minutes on a CPU) and starts again from its seed.
"""

from __future__ import annotations

import string
from typing import Callable, Sequence

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, T5EncoderModel, T5ForConditionalGeneration

from ..errors import UserError
from ..models.text_encoder import (EOS, MAX_LENGTH, PAD, SENTINELS, SPECIAL_TOKENS, TEXT_ENCODER_PRESETS, UNK,
                                   CaptionEncoder)
from .run import descend

Report = Callable[[int, int, float], None]


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A BPE tokenizer learnt from the captions, with T5's specials (ids as in SPECIAL_TOKENS) and </s>
    appended to every text. Deterministic: the same captions give the same tokenizer.

    Choices, and why: (1) BPE, not T5's SentencePiece Unigram: tokenizers' Unigram trainer leaves
    repetitive caption corpora split into single letters, BPE learns whole words on them. (2) Text is
    NFKD-normalized, accents stripped, lowercased and whitespace collapsed: captions are generated and
    consistently cased, so case carries nothing there, while a player's typed prompt may be cased
    anyhow; decode(encode(s)) is therefore s in that normal form. (3) Every digit is its own token:
    numbers (health, ammo, tics) are unbounded, so "194" must be "1 9 4", never <unk> or an opaque
    piece; (4) all printable ASCII is in the alphabet, so only exotic characters become <unk>.
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
    # Metaspace marks word starts with "▁" (as SentencePiece does), so decoding restores the spaces.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.Metaspace()
    alphabet = list(string.ascii_lowercase + string.digits + string.punctuation) + ["▁"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}",
                                                       special_tokens=[(EOS, SPECIAL_TOKENS.index(EOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK,
                                   extra_special_tokens=list(SENTINELS), model_max_length=MAX_LENGTH)


def _partition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """``total`` split into ``parts`` positive lengths, uniformly over all such splits."""
    cuts = np.sort(rng.choice(total - 1, parts - 1, replace=False)) + 1 if parts > 1 else np.zeros(0, int)
    return np.diff(np.concatenate([[0], cuts, [total]]))


def random_spans_mask(length: int, rng: np.random.Generator, noise_density: float = 0.15,
                      mean_span_length: float = 3.0) -> np.ndarray:
    """(length,) bool, True on the dropped tokens: round(length * density) of them (at least one, and
    at least one kept) in round(noise / mean_span_length) spans, as in T5. Unlike T5's code, which always
    ends on a dropped span, the kept tokens may also come last, so every position can be dropped or kept."""
    mask = np.zeros(length, bool)
    if length < 2:
        return mask
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = max(round(noise / mean_span_length), 1)
    noise_lengths = _partition(noise, spans, rng)
    # spans + 1 stretches of kept tokens: inner ones at least 1 long (else two spans would merge), the
    # first and last possibly empty: draw them one longer, then shorten them.
    keep_lengths = _partition(length - noise + 2, spans + 1, rng)
    keep_lengths[0] -= 1
    keep_lengths[-1] -= 1
    pos = 0
    for keep, drop in zip(keep_lengths, noise_lengths):
        pos += keep
        mask[pos:pos + drop] = True
        pos += drop
    return mask


def span_corrupt(ids: Sequence[int], rng: np.random.Generator, sentinel_ids: Sequence[int],
                 noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[list[int], list[int]]:
    """T5's span corruption of one token sequence (without </s>) -> (inputs, targets), without </s>.

    Inputs keep the kept tokens with each dropped span replaced by the next sentinel; targets list
    each sentinel followed by the span it stands for: "a b c d e" -> "a <0> d e", "<0> b c".
    """
    mask = random_spans_mask(len(ids), rng, noise_density, mean_span_length)
    inputs: list[int] = []
    targets: list[int] = []
    span = -1
    for i, (token, dropped) in enumerate(zip(ids, mask)):
        if dropped and (i == 0 or not mask[i - 1]):
            span += 1
            if span >= len(sentinel_ids):
                raise ValueError(f"{span + 1} spans but only {len(sentinel_ids)} sentinels")
            inputs.append(sentinel_ids[span])
            targets.append(sentinel_ids[span])
        (targets if dropped else inputs).append(int(token))
    return inputs, targets


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def pretrain(texts: Sequence[str], preset: str = "cpu", steps: int = 2000, batch_size: int = 32,
             learning_rate: float = 1e-3, seed: int = 0, report: Report | None = None, *,
             tokenizer: PreTrainedTokenizerFast | None = None) -> CaptionEncoder:
    """Train a tokenizer (unless given) and a T5 with span corruption on the captions; return its
    encoder, frozen. The same captions, arguments and seed give the same weights (on one machine and
    thread count). ``report(step, steps, loss)`` comes after each step with the loss of that step's
    batch, computed before its update: step 0's loss is the untrained model's.
    Not resumable: there is no checkpoint; a run starts from its seed.
    """
    if preset not in TEXT_ENCODER_PRESETS:
        raise UserError(f"unknown text encoder preset '{preset}'", f"use one of {sorted(TEXT_ENCODER_PRESETS)}")
    if not texts:
        raise UserError("no captions to pretrain the text encoder on", "pass at least one caption")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"caption {i} is empty", "drop empty captions before pretraining")
    spec = TEXT_ENCODER_PRESETS[preset]
    if tokenizer is None:
        tokenizer = train_tokenizer(texts, spec.vocab_size)
    eos = tokenizer.eos_token_id
    sentinel_ids = tokenizer.convert_tokens_to_ids(list(SENTINELS))
    ids = tokenizer(list(texts), verbose=False)["input_ids"]  # over-long ones are refused below
    for i, row in enumerate(ids):
        if len(row) > MAX_LENGTH:
            raise UserError(f"caption {i} is {len(row)} tokens, the text encoder reads at most {MAX_LENGTH}",
                            "shorten the captions")
    ids = [row[:-1] for row in ids]  # drop </s>; it is appended again after corruption

    config = spec.t5_config(len(tokenizer))
    rng = np.random.default_rng(seed)  # batches and masks
    with torch.random.fork_rng(devices=[]):  # the initial weights, without touching the caller's RNG
        torch.manual_seed(seed)
        model = T5ForConditionalGeneration(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    warmup = max(1, min(100, steps // 10))
    # Linear warmup, then linear decay to a tenth: short runs on small data need no finer schedule.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, 1.0 - 0.9 * max(0, s - warmup) / max(1, steps - warmup)))
    order: list[int] = []
    for step in range(steps):
        while len(order) < batch_size:  # epochs of shuffled captions
            order += rng.permutation(len(ids)).tolist()
        batch, order = order[:batch_size], order[batch_size:]
        pairs = [span_corrupt(ids[j], rng, sentinel_ids) for j in batch]
        input_ids = _pad([inp + [eos] for inp, _ in pairs], tokenizer.pad_token_id)
        labels = _pad([tgt + [eos] for _, tgt in pairs], -100)  # -100: ignored by the loss
        loss = model(input_ids=input_ids, attention_mask=(input_ids != tokenizer.pad_token_id).long(),
                     labels=labels).loss
        descend(loss, optimizer, model.parameters(), 1.0)
        schedule.step()
        if report is not None:
            report(step, steps, float(loss.detach()))

    with torch.random.fork_rng(devices=[]):  # its random init is overwritten next; leave the caller's RNG be
        encoder = T5EncoderModel(config)
    # The encoder's weights are the shared embedding and the encoder stack, under the same names.
    encoder.load_state_dict({k: v for k, v in model.state_dict().items() if k.startswith(("shared.", "encoder."))})
    return CaptionEncoder(tokenizer, encoder, preset)
