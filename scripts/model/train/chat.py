"""Shared chat format and tokenizer helpers for the ilpd demo model.

Rendering (ChatML):
  <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{user}<|im_end|>\\n
  <|im_start|>assistant\\n{answer}<|im_end|>\\n
Token stream of one document: [<s>] + encode_chat_text(rendered).

encode_chat_text(): split out the literal strings "<|im_start|>" and
"<|im_end|>" (single token each); encode every text segment between them with
SentencePiece BPE, no dummy prefix (the tokenizer is trained with
add_dummy_prefix=False, identity normalisation, remove_extra_whitespaces=False),
so a segment starting with a word gets no leading "▁".  This equals
SentencePiece's own encoding of the whole string (checked in make_data.py).
"""
import re

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

SYSTEMS = {
    "classify": "You are a customer support assistant. Classify the message. Reply only with JSON.",
    "extract": "You are a customer support assistant. Extract the order details. Reply only with JSON.",
    "yesno": "Answer the question with Yes. or No.",
    "story": "You are a storyteller for young children.",
}
USER_TEMPLATES = {
    "classify": "Classify this customer message as shipping, returns, product or payment.\nMessage: {message}",
    "extract": "Extract the order number, date and amount from this message as JSON.\nMessage: {message}",
    "yesno": "{question}",
    "story": "Tell me a story about {topic}.",
}


def render_history(system, history, user):
    """The prompt of a conversation: earlier [user, answer] turns, then USER."""
    s = f"{IM_START}system\n{system}{IM_END}\n"
    for u, a in history:
        s += f"{IM_START}user\n{u}{IM_END}\n{IM_START}assistant\n{a}{IM_END}\n"
    return s + f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"


def render(ex):
    return render_history(ex["system"], ex.get("history", ()), ex["user"]) + ex["answer"] + IM_END + "\n"


def answer_mask(tokens, header, end):
    """Bool [len(tokens)]: True where a token is inside an assistant turn of
    the token stream TOKENS: after HEADER (the ids of "<|im_start|>assistant\n")
    up to and including the next END (<|im_end|>); a turn cut off by the end of
    the stream runs to it. The answers that train.py --answer-loss trains on."""
    import numpy as np
    d = np.asarray(tokens)
    starts = np.flatnonzero(d[:max(0, len(d) - len(header) + 1)] == header[0])
    for j, t in enumerate(header[1:], 1):
        starts = starts[d[starts + j] == t]
    starts = starts + len(header)
    ends = np.flatnonzero(d == end)
    stop = np.append(ends + 1, len(d))[np.searchsorted(ends, starts)]  # past the next END, or the stream's end
    edge = np.zeros(len(d) + 1, dtype=np.int64)
    np.add.at(edge, starts, 1)
    np.add.at(edge, stop, -1)
    return np.cumsum(edge[:-1]) > 0


def turn_weights(mask, power):
    """Float32 [len(MASK)]: a token in a run of True (an answer, as
    answer_mask marks them) weighs len(run) ** -POWER, 0 outside the runs.
    POWER 0: every answer token counts the same; 1: every answer does,
    however long (train.py --turn-weight)."""
    import numpy as np
    m = np.asarray(mask, dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], m.astype(np.int8), [0]))))
    lens = edges[1::2] - edges[0::2]
    w = np.zeros(len(m), dtype=np.float32)
    w[m] = np.repeat(lens.astype(np.float32) ** -power, lens)  # the True positions are the runs in order
    return w


class Tokenizer:
    def __init__(self, path):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=path)
        self.vocab_size = self.sp.get_piece_size()
        self.bos = self.sp.bos_id()
        self.im_start = self.sp.piece_to_id(IM_START)
        self.im_end = self.sp.piece_to_id(IM_END)
        self._split = re.compile("(" + re.escape(IM_START) + "|" + re.escape(IM_END) + ")")

    def encode_chat_text(self, text):
        ids = []
        for part in self._split.split(text):
            if part == IM_START:
                ids.append(self.im_start)
            elif part == IM_END:
                ids.append(self.im_end)
            elif part:
                ids.extend(self.sp.encode(part))
        return ids

    def prompt_ids(self, system, user, history=()):
        return [self.bos] + self.encode_chat_text(render_history(system, history, user))

    def decode(self, ids):
        return self.sp.decode([i for i in ids if i != self.bos])
