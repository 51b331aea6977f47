#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for the tokenizer tests.

  hf_reference.py json  TOKENIZER_JSON TEXTS_JSON OUT_JSON
      Encodes each text of TEXTS_JSON (a list of strings) with the tokenizer.json as HF loads
      it (add_special_tokens=False; special tokens in the text are parsed, HF's default).
  hf_reference.py gguf  VOCAB_JSON TEXTS_JSON OUT_JSON
      Builds a byte-level BPE tokenizers.Tokenizer from a GGUF vocab dump (gguf_vocab_dump.py)
      with SmolLM2's pipeline as its tokenizer.json has it: pre_tokenizer Sequence[Digits
      (individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)], ByteLevel
      decoder, control tokens (type 3) as special added tokens, user-defined (type 4) as
      non-special added tokens.
  hf_reference.py lossy BYTES_JSON OUT_JSON
      Decodes each list of byte values with errors='replace'.
OUT_JSON: {"ids": [[...], ...], "decoded": [...]} (decoded = decode(ids) with specials kept).
"""
import json
import sys


def from_gguf(vocab_path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    v = json.load(open(vocab_path, encoding="utf-8"))
    tokens, types = v["tokens"], v.get("token_type") or [1] * len(v["tokens"])
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(tokens[i], special=(types[i] == 3), normalized=False)
             for i in range(len(tokens)) if types[i] in (3, 4)]
    tok.add_tokens(added)
    return tok


def main():
    mode = sys.argv[1]
    if mode == "lossy":
        data = json.load(open(sys.argv[2]))
        out = [bytes(b).decode("utf-8", errors="replace") for b in data]
        json.dump({"decoded": out}, open(sys.argv[3], "w", encoding="utf-8"), ensure_ascii=False)
        return
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(sys.argv[2]) if mode == "json" else from_gguf(sys.argv[2])
    texts = json.load(open(sys.argv[3], encoding="utf-8"))
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ids = [e.ids for e in encs]
    decoded = tok.decode_batch(ids, skip_special_tokens=False)
    json.dump({"ids": ids, "decoded": decoded}, open(sys.argv[4], "w", encoding="utf-8"),
              ensure_ascii=False)


if __name__ == "__main__":
    main()
