#!/usr/bin/python3
"""Check that llama.cpp's SPM tokenizer algorithm reproduces our encoding.

  /usr/bin/python3 scripts/model/train/check_tokenizer.py

Reimplements llama.cpp's llm_tokenizer_spm (spaces -> "▁", no space prefix,
UTF-8 chars as symbols, repeatedly merge the adjacent pair whose concatenation
is a vocab piece with the highest score (ties: leftmost), then emit pieces,
splitting unknown symbols back via the merge history and finally into
<0xNN> byte tokens) and compares it with SentencePiece on every held-out chat.
This is the algorithm a C tokenizer for models/ilpd-demo-*.gguf must implement.
"""
import os
import sys, json, heapq, glob
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from chat import Tokenizer, render, IM_START, IM_END
tok = Tokenizer(os.path.join(REPO, "models", "tokenizer.model")); sp = tok.sp
pieces = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
score = [sp.get_score(i) for i in range(sp.get_piece_size())]
def spm_llama(text):
    text = text.replace(' ', '\u2581')
    sym = list(text)  # utf-8 chars
    n = len(sym); prev = list(range(-1, n - 1)); nxt = list(range(1, n + 1)); nxt[-1] = -1 if n else -1
    alive = [True] * n; q = []; revm = {}
    def add(l, r):
        if l < 0 or r < 0: return
        s = sym[l] + sym[r]
        if s in pieces:
            heapq.heappush(q, (-score[pieces[s]], l, r, s))
    for i in range(n - 1): add(i, i + 1)
    while q:
        _, l, r, s = heapq.heappop(q)
        if not alive[l] or not alive[r] or sym[l] + sym[r] != s or nxt[l] != r: continue
        revm[s] = (sym[l], sym[r]); sym[l] = s; alive[r] = False
        nxt[l] = nxt[r]
        if nxt[r] >= 0: prev[nxt[r]] = l
        add(prev[l], l); add(l, nxt[l])
    out = []
    def emit(s):
        if s in pieces: out.append(pieces[s]); return
        if s in revm: emit(revm[s][0]); emit(revm[s][1]); return
        for b in s.encode('utf-8'): out.append(pieces['<0x%02X>' % b])
    i = 0
    while i != -1 and n:
        emit(sym[i]); i = nxt[i]
    return out
import re
bad = tot = 0
for f in glob.glob(os.path.join(REPO, 'models', 'heldout', '*.jsonl')):
    for line in open(f):
        ex = json.loads(line); txt = render(ex)
        ids = []
        for part in re.split('(<\\|im_start\\|>|<\\|im_end\\|>)', txt):
            if part == IM_START: ids.append(tok.im_start)
            elif part == IM_END: ids.append(tok.im_end)
            elif part: ids += spm_llama(part)
        tot += 1
        if ids != tok.encode_chat_text(txt):
            bad += 1
            if bad < 3: print('MISMATCH', txt[:200])
print('checked', tot, 'mismatches', bad)
