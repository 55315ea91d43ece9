"""The caption encoder: tokenizer, span corruption, pretraining, the frozen encoder and its folder."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from gamengen.errors import UserError
from gamengen.models.text_encoder import MAX_LENGTH, SENTINELS, CaptionEncoder
from gamengen.train.text_encoder import pretrain, random_spans_mask, span_corrupt, train_tokenizer

MAPS = ["E1M1", "E1M2", "E1M3", "E2M4", "MAP01", "MAP07"]
ACTS = ["turn left", "turn right", "move forward", "move backward", "fire", "open door", "strafe left"]


def caption(rng: random.Random, map_name: str | None = None) -> str:
    m = map_name or rng.choice(MAPS)
    return (f"Summary: the player {rng.choice(['walks', 'runs', 'fights'])} through {m} with {rng.randint(1, 200)} "
            f"health and {rng.randint(0, 50)} {rng.choice(['shells', 'bullets', 'rockets'])}. Game_Meta: Freedoom "
            f"phase {rng.randint(1, 2)}, map {m}, tic {rng.randint(0, 99999)}. Act: {rng.choice(ACTS)}")


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    rng = random.Random(7)
    return [caption(rng) for _ in range(300)]


@pytest.fixture(scope="module")
def trained(corpus):
    losses: list[float] = []
    encoder = pretrain(corpus, "tiny", steps=150, batch_size=16, learning_rate=3e-3, seed=0,
                       report=lambda step, total, loss: losses.append(loss))
    return encoder, losses


def normal_form(text: str) -> str:
    """The documented round trip: lowercase, whitespace collapsed."""
    return " ".join(text.lower().split())


def test_tokenizer_round_trips_with_t5_specials(corpus):
    tok = train_tokenizer(corpus, 300)
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert [tok.convert_tokens_to_ids(s) for s in SENTINELS] == list(range(3, 3 + len(SENTINELS)))
    assert len(tok) <= 300
    novel = "  Summary:  the PLAYER runs through MAP99 with 90210 health.\tAct: fire  "
    for text in corpus[:50] + [novel]:
        ids = tok(text)["input_ids"]
        assert ids[-1] == tok.eos_token_id and ids.count(tok.eos_token_id) == 1
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == normal_form(text)
    # Numbers are spelt digit by digit, so an unseen one is still exact.
    pieces = tok.convert_ids_to_tokens(tok("tic 90210")["input_ids"])
    assert [p for p in pieces if p.isdigit()] == list("90210")
    # A sentinel in text is one token (the span-corruption inputs rely on it).
    assert tok(SENTINELS[5], add_special_tokens=False)["input_ids"] == [8]
    # Deterministic: the same captions give the same tokenizer.
    assert train_tokenizer(corpus, 300).backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


def test_span_mask_has_t5_density_and_span_length():
    rng = np.random.default_rng(0)
    dropped = total = spans = 0
    seen = np.zeros((2, 30), bool)  # [kept, dropped] seen at each position of a 30-token sequence
    for draw in range(2000):
        length = 30 if draw % 2 else int(rng.integers(8, MAX_LENGTH))
        mask = random_spans_mask(length, rng)
        dropped, total = dropped + mask.sum(), total + length
        spans += int(mask[0]) + int((mask[1:] & ~mask[:-1]).sum())
        if length == 30:
            seen[mask.astype(int), np.arange(30)] = True
    assert abs(dropped / total - 0.15) < 0.01
    assert 2.7 < dropped / spans < 3.3
    assert seen.all()  # every position, first and last included, is sometimes dropped and sometimes kept
    assert not random_spans_mask(1, rng).any()


def reconstruct(inputs: list[int], targets: list[int], sentinels: list[int]) -> list[int]:
    spans: dict[int, list[int]] = {}
    for token in targets:
        if token in sentinels:
            current = spans.setdefault(token, [])
        else:
            current.append(token)
    out: list[int] = []
    for token in inputs:
        out += spans.pop(token) if token in sentinels else [token]
    assert not spans  # every target span was used
    return out


def test_span_corruption_reconstructs_and_is_seeded():
    sentinels = list(range(1000, 1000 + len(SENTINELS)))
    rng = np.random.default_rng(1)
    for length in [2, 3, 7, 20, 64, 150, MAX_LENGTH - 1]:
        ids = rng.integers(3, 900, size=length).tolist()
        for seed in range(20):
            inputs, targets = span_corrupt(ids, np.random.default_rng(seed), sentinels)
            assert reconstruct(inputs, targets, sentinels) == ids
            used = [t for t in inputs if t in sentinels]
            assert used == sentinels[:len(used)] and used  # sentinels in order, from <extra_id_0>
            assert len(targets) - len(used) == round(length * 0.15) or length * 0.15 < 1
    ids = list(range(10, 110))
    draw = [span_corrupt(ids, np.random.default_rng(s), sentinels) for s in (5, 5, 6)]
    assert draw[0] == draw[1] and draw[0] != draw[2]


def test_pretraining_learns_and_is_deterministic(corpus, trained):
    encoder, losses = trained
    assert len(losses) == 150
    assert np.mean(losses[-10:]) < 0.7 * losses[0], (losses[0], losses[-10:])
    rng_state = torch.get_rng_state()
    again = pretrain(corpus, "tiny", steps=150, batch_size=16, learning_rate=3e-3, seed=0)
    assert torch.equal(torch.get_rng_state(), rng_state)  # the caller's RNG is left alone
    a, b = encoder.model.state_dict(), again.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other = pretrain(corpus, "tiny", steps=5, batch_size=16, learning_rate=3e-3, seed=1).model.state_dict()
    assert not torch.equal(a["shared.weight"], other["shared.weight"])


def test_encode_shapes_masks_padding_and_frozen(trained):
    encoder, _ = trained
    rng = random.Random(3)
    short = "Act: fire"
    long = caption(rng) + " " + caption(rng)
    hidden, mask = encoder.encode([short, long])
    counts = [len(encoder.tokenizer(t)["input_ids"]) for t in (short, long)]
    assert hidden.shape == (2, max(counts), encoder.width) and encoder.width == 16
    assert hidden.dtype == torch.float32 and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == counts and mask[0, :counts[0]].all()
    alone, alone_mask = encoder.encode([short])
    assert alone.shape == (1, counts[0], 16) and alone_mask.all()
    torch.testing.assert_close(hidden[0, :counts[0]], alone[0], atol=1e-5, rtol=0)
    assert (hidden[0, counts[0]:] == 0).all()  # pad rows are zero
    # Captions that differ only in the map name give different features.
    a, b = (caption(random.Random(11), m) for m in ("E1M1", "MAP07"))
    (ha, ma), (hb, mb) = encoder.encode([a]), encoder.encode([b])
    if ha.shape == hb.shape:
        assert (ha - hb).abs().max() > 1e-3
    assert not torch.allclose(ha[ma].mean(0), hb[mb].mean(0), atol=1e-4)
    assert not any(p.requires_grad for p in encoder.model.parameters())
    assert not hidden.requires_grad and not encoder.model.training


def test_save_load_round_trip(trained, tmp_path):
    encoder, _ = trained
    folder = tmp_path / "text"
    encoder.save(folder, card="# a card\n")
    encoder.save(folder)  # over an existing folder: swapped whole
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["README.md", "config.json", "gamengen_text.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text"]  # no temporary siblings left
    texts = ["Act: turn left", caption(random.Random(5))]
    loaded = CaptionEncoder.load(folder)
    assert (loaded.width, loaded.max_length, loaded.preset) == (16, MAX_LENGTH, "tiny")
    for got, want in zip(loaded.encode(texts), encoder.encode(texts)):
        assert torch.equal(got, want)
    assert not any(p.requires_grad for p in loaded.model.parameters())


def broken_copy(src: Path, dst: Path, name: str, damage) -> Path:
    shutil.copytree(src, dst)
    damage(dst / name)
    return dst


def test_load_refuses_what_is_not_a_text_encoder(trained, tmp_path):
    encoder, _ = trained
    good = tmp_path / "good"
    encoder.save(good)

    def drop_one_tensor(path: Path) -> None:
        tensors = load_file(path)
        tensors.pop(sorted(tensors)[0])
        save_file(tensors, path, metadata={"format": "pt"})

    def truncate(path: Path) -> None:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    cases = {
        "missing": tmp_path / "nowhere",
        "no meta": broken_copy(good, tmp_path / "a", "gamengen_text.json", Path.unlink),
        "bad json": broken_copy(good, tmp_path / "b", "gamengen_text.json", lambda p: p.write_text("{not json")),
        "other kind": broken_copy(good, tmp_path / "c", "gamengen_text.json",
                                  lambda p: p.write_text('{"format": "gamengen-world-model", "version": 1}')),
        "truncated weights": broken_copy(good, tmp_path / "d", "model.safetensors", truncate),
        "no weights": broken_copy(good, tmp_path / "e", "model.safetensors", Path.unlink),
        # transformers would only warn and draw the missing tensor at random.
        "a tensor missing": broken_copy(good, tmp_path / "f", "model.safetensors", drop_one_tensor),
        "bad tokenizer": broken_copy(good, tmp_path / "g", "tokenizer.json", lambda p: p.write_text("{}")),
    }
    for case, folder in cases.items():
        with pytest.raises(UserError) as info:
            CaptionEncoder.load(folder)
        assert "fix" in str(info.value) and "\n" not in str(info.value), case


def test_bad_prompts_are_user_errors(trained):
    encoder, _ = trained
    for prompts in ([""], ["   "], ["Act: fire", " \t"], []):
        with pytest.raises(UserError, match="fix"):
            encoder.encode(prompts)
    too_long = " ".join(["fire"] * 400)
    n = len(encoder.tokenizer(too_long)["input_ids"])
    with pytest.raises(UserError, match=f"{n} tokens.*at most {MAX_LENGTH}.*fix"):
        encoder.encode([too_long])
    with pytest.raises(UserError, match="prompt 1 is"):
        encoder.encode(["Act: fire", too_long])
    with pytest.raises(UserError, match="fix"):
        pretrain(["Act: fire", too_long], "tiny", steps=1)
