#!/usr/bin/python3
"""Build the ilpd demo-model training data, held-out sets and tokenizer.

Deterministic for a given --seed. Steps:
  1. Split the TinyStories 2 MiB sample into train / held-out stories (the
     last --heldout-stories complete stories are held out; the final, truncated
     story is dropped).
  2. Generate chat examples: stories ("Tell me a story about {topic}.") and
     synthetic tasks (classify, extract, yesno). Held-out task examples come
     from disjoint entity pools / disjoint parameter keys (see the gen_*
     functions); every held-out user string is checked absent from training.
  3. Train a SentencePiece BPE tokenizer (models/tokenizer.model) on epoch 0.
  4. Tokenize --epochs epochs (fresh topic phrasings and fresh task samples
     per epoch, stories ~50% / tasks ~50% by tokens), shuffle documents within
     each epoch and write one flat uint16 token stream: <s> chat... <s> chat...

Tokenization contract (identical in the C engine):
  text = ChatML rendering (see render()).  Special tokens <|im_start|> and
  <|im_end|> are split out first; each text segment between them is encoded by
  SentencePiece BPE with NO dummy prefix, identity normalisation and no
  whitespace collapsing (GGUF: tokenizer.ggml.add_space_prefix = false).
  A space becomes "▁"; "\n" is not in the vocabulary and is byte-fallback
  <0x0A>.  One <s> (BOS) starts every document.

Usage:
  /usr/bin/python3 scripts/model/train/make_data.py --out /work/ilpd-train/data
"""
import argparse
import hashlib
import json
import os
import random
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from chat import (IM_START, IM_END, SYSTEMS, USER_TEMPLATES, render,  # noqa: E402
                  Tokenizer)

STORIES = "/work/shared/data/tinystories/tinystories_train_2MiB.txt"


def h(s):
    return int(hashlib.md5(s.encode()).hexdigest()[:8], 16)


# --------------------------------------------------------------------------
# Stories
# --------------------------------------------------------------------------
STOP = set("""a an the and or but so because then than that this these those
there their they them he she him her his hers it its we us our you your i me my
mine was were is are be been being am do did does done have has had not no yes
very too also just only all some any many much more most one two three four
five first next last day time once upon when while after before into onto with
without from for of to in on at by up down out over under again away back
little big small new old good bad happy sad said say says went go goes going
came come comes saw see sees seen looked look looks wanted want wants liked like
likes loved love loves played play plays felt feel feels made make makes got get
gets took take takes gave give gives could would should can will might must let
what who how why where which lot lots thing things something nothing everything
anything someone everyone anyone always never every other each same own way
asked ask told tell thought think knew know found find named name called """
           .split())

ADJ = set("""little big small tiny huge large old young new good bad nice kind
happy sad shiny red blue green yellow pink purple brown black white orange
soft hard funny silly brave curious shy scared angry pretty beautiful special
friendly fluffy furry wise strong long short tall fast slow bright dark warm cold
great lovely magic magical colorful smart clever lonely quiet loud gentle""".split())


def load_stories():
    raw = open(STORIES, encoding="utf-8").read()
    parts = raw.split("<|endoftext|>")
    stories = [p.strip() for p in parts[:-1]]  # last one is truncated
    stories = [s for s in stories if len(s) > 50]
    return stories


NOT_TOPIC = set("""mom dad mommy daddy mother father closer bit while moment look
idea hug kiss smile way place part piece lesson sound voice minute second
hand head face eyes feet""".split())


def art(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def story_topics(story):
    """Candidate topic phrases derived from the story text itself."""
    topics = []
    m = re.search(r"\b(?:a|an)\s+((?:[a-z]+\s+){0,2}?[a-z]+)\s+named\s+([A-Z][a-z]+)", story)
    name = None
    if m:
        desc, name = m.group(1), m.group(2)
        topics.append(f"{art(desc)} named {name}")
        topics.append(name)
    else:
        m = re.search(r"\bnamed\s+([A-Z][a-z]+)", story)
        if m:
            name = m.group(1)
            topics.append(name)
    # nouns: words after a/an/the (optionally after one adjective)
    counts = {}
    indef = set()
    for m in re.finditer(r"\b(a|an|the|his|her)\s+(?:([a-z]+)\s+)?([a-z]+)\b", story):
        det, adj, noun = m.group(1), m.group(2), m.group(3)
        if adj and adj not in ADJ:
            # "the big dog" ok; "the dog ran" -> noun is adj slot
            noun = adj
            adj = None
        if noun in STOP or noun in ADJ or len(noun) < 3 or noun.endswith("ly"):
            continue
        counts[noun] = counts.get(noun, 0) + 1
        if det in ("a", "an"):
            indef.add(noun)
    nouns = sorted((w for w in counts if w in indef and w not in NOT_TOPIC),
                   key=lambda w: (-counts[w], story.find(w)))
    nouns = [n for n in nouns if not name or n != name.lower()][:4]
    if nouns:
        topics.append(art(nouns[0]))
        if name:
            topics.append(f"{name} and {art(nouns[0])}")
        if len(nouns) >= 2:
            topics.append(f"{art(nouns[0])} and {art(nouns[1])}")
        if len(nouns) >= 3:
            topics.append(f"{art(nouns[0])}, {art(nouns[1])} and {art(nouns[2])}")
    if not topics:
        topics.append("a little adventure")
    return topics


STORY_VARIANTS = [  # occasional alternative phrasings (train only)
    "Tell me a story about {topic}.",
    "Write a short story about {topic}.",
    "Can you tell me a story about {topic}?",
    "Please tell me a story about {topic}.",
    "I want a story about {topic}.",
]


def gen_story(story, rng, exact=False):
    topics = story_topics(story)
    if " named " in topics[0] and rng.random() < 0.4:
        topic = topics[0]
    else:
        topic = rng.choice(topics)
    if exact or rng.random() < 0.75:
        user = USER_TEMPLATES["story"].format(topic=topic)
    else:
        user = rng.choice(STORY_VARIANTS[1:]).format(topic=topic)
    return {"task": "story", "system": SYSTEMS["story"], "user": user, "answer": story}


# --------------------------------------------------------------------------
# Entity pools (split into train / held-out by index)
# --------------------------------------------------------------------------
PRODUCTS = ["blender", "toaster", "kettle", "coffee maker", "backpack", "rain jacket",
            "running shoes", "wool sweater", "desk lamp", "office chair", "phone case",
            "laptop stand", "water bottle", "yoga mat", "headphones", "bluetooth speaker",
            "smart watch", "fitness tracker", "camera", "tripod", "gaming mouse",
            "keyboard", "monitor", "webcam", "hair dryer", "electric toothbrush",
            "air fryer", "rice cooker", "frying pan", "knife set", "cutting board",
            "bed sheets", "pillow", "duvet cover", "bath towel", "winter boots",
            "sunglasses", "leather wallet", "travel mug", "garden hose", "lawn mower",
            "drill", "tool kit", "bike helmet", "tent", "sleeping bag", "hiking poles",
            "kids bike", "puzzle", "board game", "teddy bear", "dog bed", "cat tree",
            "printer", "router", "power bank", "phone charger", "tablet", "e-reader",
            "suitcase", "umbrella", "scarf", "gloves", "denim jacket", "dress shirt",
            "wrist watch", "vacuum cleaner", "mixer", "slow cooker", "ceiling fan",
            "space heater", "bookshelf", "sofa cover", "rug", "curtains", "mirror",
            "alarm clock", "baby stroller", "car seat", "skateboard", "soccer ball",
            "tennis racket", "swimsuit", "hoodie", "jeans", "sneakers", "sandals"]
NAMES = ["Anna", "Ben", "Carlos", "Diana", "Emma", "Farid", "Grace", "Hiro", "Ines",
         "Jack", "Kara", "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa",
         "Sam", "Tara", "Umar", "Vera", "Will", "Xena", "Yusuf", "Zoe", "Alice",
         "Bruno", "Chloe", "David", "Elena", "Frank", "Gina", "Hugo", "Ivy", "James",
         "Kim", "Leo", "Mia", "Nina", "Oscar", "Paula", "Raj", "Sara", "Tom", "Uma",
         "Victor", "Wendy", "Yara", "Zack", "Lena", "Marco", "Nora", "Omar", "Priya"]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS", "the courier", "the post office",
            "Royal Mail", "the delivery company", "Canada Post", "the driver"]
PLACES = ["Canada", "Texas", "London", "Berlin", "Australia", "Ohio", "Mexico",
          "Paris", "Japan", "Florida", "Spain", "Chicago", "Ireland", "Brazil"]
COLORS = ["black", "white", "red", "blue", "green", "grey", "pink", "navy",
          "beige", "silver", "yellow", "purple"]
PAYMETHODS = ["PayPal", "Apple Pay", "a gift card", "a debit card", "cash on delivery",
              "Google Pay", "a bank transfer", "store credit", "Klarna", "a credit card"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def split_pool(pool, held):
    """Every 5th item (by position) is held out."""
    if held:
        return [x for i, x in enumerate(pool) if i % 5 == 2]
    return [x for i, x in enumerate(pool) if i % 5 != 2]


class Pools:
    def __init__(self, held):
        self.products = split_pool(PRODUCTS, held)
        self.names = split_pool(NAMES, held)
        self.carriers = split_pool(CARRIERS, held) if held else CARRIERS
        self.places = split_pool(PLACES, held)
        self.colors = COLORS
        self.pay = PAYMETHODS


def order_number(rng):
    L = "ABCDEFGHJKLMNPRSTUVWXYZ"
    k = rng.random()
    if k < 0.6:
        return f"{rng.choice(L)}-{rng.randint(10000, 99999)}"
    if k < 0.85:
        return f"{rng.choice(L)}{rng.choice(L)}-{rng.randint(1000, 999999)}"
    return f"{rng.randint(100000, 9999999)}"


def money(rng, lo=5, hi=500):
    v = rng.randint(lo * 100, hi * 100) / 100
    if rng.random() < 0.2:
        v = float(int(v))
    return v


def fmt_money(rng, v):
    s = f"{v:.2f}"
    return rng.choice([f"${s}", f"${s}", f"{s} dollars", f"USD {s}", f"{s} USD", f"${s}"])


def rand_date(rng):
    y = rng.choice([2022, 2023, 2024, 2025])
    m = rng.randint(1, 12)
    d = rng.randint(1, 28)
    return y, m, d


def date_str(k, y, m, d):
    """Date format K (0-4) of y-m-d."""
    return [f"{y}-{m:02d}-{d:02d}", f"{MONTHS[m-1]} {d}, {y}", f"{d} {MONTHS[m-1]} {y}",
            f"{MONTHS[m-1][:3]} {d}, {y}", f"{MONTHS[m-1]} {d} {y}"][k]


def fmt_date(rng, y, m, d):
    return date_str(rng.randint(0, 4), y, m, d)


def when(rng):
    return rng.choice(["yesterday", "last week", "three days ago", "on Monday",
                       "two weeks ago", "last Friday", "a month ago", "this morning",
                       "on Tuesday", "five days ago"])


# --------------------------------------------------------------------------
# classify
# --------------------------------------------------------------------------
# (category, confidence, template).  Confidence is a property of the template:
# explicit, unambiguous wording -> 0.95; clear -> 0.9; indirect -> 0.8;
# vague / could be another category -> 0.6-0.7.
CLASSIFY_T = [
    ("shipping", 0.95, "Where is my order {order}? It was supposed to arrive {when} but the tracking has not changed."),
    ("shipping", 0.95, "My package from {carrier} still has not arrived. Can you check the shipping status?"),
    ("shipping", 0.9, "When will my {product} be delivered?"),
    ("shipping", 0.9, "The tracking number you sent me for the {product} does not work."),
    ("shipping", 0.9, "I need to change the delivery address for order {order}."),
    ("shipping", 0.95, "How long does shipping to {place} usually take?"),
    ("shipping", 0.9, "The app says my parcel was delivered {when}, but I never got it."),
    ("shipping", 0.8, "{carrier} left a note but nobody was home. What should I do?"),
    ("shipping", 0.8, "It has been ten days and I am still waiting for my {product}."),
    ("shipping", 0.7, "Something is wrong with my order {order}, it is not here yet."),
    ("shipping", 0.95, "Do you offer express shipping for the {product}?"),
    ("returns", 0.95, "I want to return the {product} I bought {when}."),
    ("returns", 0.9, "How do I send back the {product}? It does not fit."),
    ("returns", 0.95, "Can I get a refund for order {order}? I changed my mind."),
    ("returns", 0.9, "You sent me the wrong {product} and I would like to exchange it."),
    ("returns", 0.95, "What is your return policy for a {product}?"),
    ("returns", 0.9, "I mailed the {product} back {when} and still have not seen my refund."),
    ("returns", 0.8, "The {product} is not what I expected. Can I swap it for a {color} one?"),
    ("returns", 0.9, "Please send me a return label for order {order}."),
    ("returns", 0.7, "I do not want the {product} anymore."),
    ("returns", 0.95, "Is the return window for the {product} thirty days?"),
    ("product", 0.9, "Does the {product} come in {color}?"),
    ("product", 0.9, "Is the {product} waterproof?"),
    ("product", 0.95, "How do I set up my new {product}? The manual is confusing."),
    ("product", 0.8, "My {product} stopped working after two days."),
    ("product", 0.9, "What size should I get for the {product}?"),
    ("product", 0.9, "Is the {product} compatible with my {product2}?"),
    ("product", 0.9, "Does the {product} come with batteries?"),
    ("product", 0.7, "I have a question about the {product}."),
    ("product", 0.95, "What are the product dimensions of the {product}?"),
    ("product", 0.8, "The {product} makes a strange noise when I turn it on."),
    ("payment", 0.95, "I was charged twice for order {order}."),
    ("payment", 0.95, "My card was declined when I tried to pay for the {product}."),
    ("payment", 0.9, "Can I pay with {pay}?"),
    ("payment", 0.9, "Why was I charged {amount} when the price said {amount2}?"),
    ("payment", 0.9, "I need an invoice for my payment of {amount}."),
    ("payment", 0.9, "The discount code {code} did not work at checkout."),
    ("payment", 0.8, "There is a charge of {amount} on my statement that I do not recognize."),
    ("payment", 0.95, "Can I split the payment for the {product} into installments?"),
    ("payment", 0.7, "Something looks wrong with my bill for order {order}."),
    ("payment", 0.9, "How do I update the credit card on my account?"),
]
OPENERS = ["", "", "", "Hi, ", "Hello, ", "Hi there. ", "Hey, ", "Good morning. ",
           "Hello team, "]
CLOSERS = ["", "", "", " Thanks.", " Thank you!", " Please help.", " Thanks, {name}.",
           " Regards, {name}.", " I need an answer soon."]


def fill(t, rng, P):
    prods = rng.sample(P.products, 2)
    a1 = money(rng)
    a2 = round(a1 * rng.choice([0.5, 0.8, 0.9]), 2)
    return t.format(order=order_number(rng), when=when(rng), carrier=rng.choice(P.carriers),
                    product=prods[0], product2=prods[1], place=rng.choice(P.places),
                    color=rng.choice(P.colors), pay=rng.choice(P.pay),
                    amount=fmt_money(rng, a1), amount2=fmt_money(rng, a2),
                    code="".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(4))
                    + str(rng.randint(5, 50)), name=rng.choice(P.names))


def gen_classify(rng, P):
    cat, conf, t = rng.choice(CLASSIFY_T)
    op, cl = rng.choice(OPENERS), rng.choice(CLOSERS)
    if op.endswith(", "):
        t = t[0].lower() + t[1:]
    msg = fill(op + t + cl, rng, P)
    ans = json.dumps({"category": cat, "confidence": conf})
    user = USER_TEMPLATES["classify"].format(message=msg)
    return {"task": "classify", "system": SYSTEMS["classify"], "user": user, "answer": ans}


# --------------------------------------------------------------------------
# extract
# --------------------------------------------------------------------------
EXTRACT_T = [
    "I placed order {order} on {date} and paid {amount}, but it has not arrived.",
    "Order {order} was charged {amount} on {date}. Can you confirm?",
    "On {date} I bought a {product} (order {order}) for {amount}.",
    "Hi, my order number is {order}. I paid {amount} on {date} for a {product}.",
    "I was billed {amount} for order {order} on {date} and I want a refund.",
    "The {product} I ordered on {date} cost {amount}. The order number is {order}.",
    "Please check order {order}: {amount}, placed {date}.",
    "Refund request for order {order}, purchase date {date}, total {amount}.",
    "Hello, I paid {amount} for my {product} on {date}. Order: {order}.",
    "My receipt says {order}, {date}, {amount}. The {product} is broken.",
    "Can you look at order {order}? It was {amount} and I ordered it on {date}.",
    "I need help with order {order}. I paid {amount} on {date} and got the wrong {product}.",
]
EXTRACT_NODATE = [
    "I paid {amount} for order {order} but it never arrived.",
    "Order {order} cost {amount} and the {product} is damaged.",
    "My order number is {order} and I was charged {amount}.",
    "Please refund {amount} for order {order}.",
]


def gen_extract(rng, P):
    y, m, d = rand_date(rng)
    amt = money(rng)
    order = order_number(rng)
    nodate = rng.random() < 0.12
    t = rng.choice(EXTRACT_NODATE if nodate else EXTRACT_T)
    msg = t.format(order=order, date=fmt_date(rng, y, m, d), amount=fmt_money(rng, amt),
                   product=rng.choice(P.products))
    op, cl = rng.choice(OPENERS[:6]), rng.choice(CLOSERS)
    if op.endswith(", "):
        msg = msg[0].lower() + msg[1:]
    msg = op + msg + cl.format(name=rng.choice(P.names))
    ans = json.dumps({"order_number": order,
                      "date": None if nodate else f"{y}-{m:02d}-{d:02d}",
                      "amount": amt})
    user = USER_TEMPLATES["extract"].format(message=msg)
    return {"task": "extract", "system": SYSTEMS["extract"], "user": user, "answer": ans}


# --------------------------------------------------------------------------
# yes/no
# --------------------------------------------------------------------------
KINDS = {
    "fruit": "apple banana orange grape pear peach cherry mango lemon strawberry plum watermelon pineapple kiwi apricot lime",
    "vegetable": "carrot potato onion pea cabbage lettuce broccoli spinach cucumber bean celery radish beet leek",
    "mammal": "dog cat horse cow lion tiger rabbit elephant sheep goat bear fox mouse pig monkey deer zebra whale",
    "bird": "sparrow eagle owl parrot duck robin penguin crow swan pigeon chicken hawk goose",
    "color": "red blue green yellow purple pink brown black white gray",
    "tool": "hammer saw wrench screwdriver drill shovel rake pliers axe chisel",
    "vehicle": "car bus truck bicycle train boat airplane motorcycle tractor scooter ship",
    "instrument": "piano guitar drum violin flute trumpet harp cello",
}
KINDS = {k: v.split() for k, v in KINDS.items()}
ITEM_KIND = {it: k for k, v in KINDS.items() for it in v}
CATS = list(KINDS) + ["animal"]
FACT_T = ["Is {x} {c}?", "Is {x} a kind of {cn}?", "Would you call {x} {c}?",
          "Yes or no: is {x} {c}?", "Tell me, is {x} {c}?", "Is it true that {x} is {c}?"]
CMP_T = {
    "gt": ["Is {a} greater than {b}?", "Is {a} bigger than {b}?", "Is {a} more than {b}?",
           "Yes or no: is {a} larger than {b}?"],
    "lt": ["Is {a} less than {b}?", "Is {a} smaller than {b}?", "Is {a} lower than {b}?"],
    "even": ["Is {a} an even number?", "Is {a} even?"],
    "odd": ["Is {a} an odd number?", "Is {a} odd?"],
    "sum": ["Is {a} plus {b} equal to {c}?", "Does {a} plus {b} equal {c}?",
            "Is {a} + {b} = {c}?", "Is the sum of {a} and {b} equal to {c}?"],
}


def is_kind(item, cat):
    k = ITEM_KIND[item]
    return k == cat or (cat == "animal" and k in ("mammal", "bird"))


def x_phrase(item):
    if ITEM_KIND[item] == "color":
        return item
    return art(item)


def c_phrase(cat):
    return "a color" if cat == "color" else art(cat)


def gen_yesno(rng, held):
    """Held-out split: facts by (item, category, template) triple hash; arithmetic
    by (kind, a, b) hash, so held-out numbers/triples never appear in training."""
    for _ in range(1000):
        if rng.random() < 0.5:
            item = rng.choice(list(ITEM_KIND))
            if rng.random() < 0.5:
                cat = ITEM_KIND[item] if rng.random() < 0.8 or ITEM_KIND[item] not in ("mammal", "bird") else "animal"
            else:
                cat = rng.choice(CATS)
            ti = rng.randrange(len(FACT_T))
            key = f"fact|{item}|{cat}|{ti}"
            q = FACT_T[ti].format(x=x_phrase(item), c=c_phrase(cat), cn=cat)
            ans = is_kind(item, cat)
        else:
            kind = rng.choice(["gt", "lt", "even", "odd", "sum", "gt", "lt", "sum"])
            if kind in ("gt", "lt"):
                a, b = rng.randint(0, 99), rng.randint(0, 99)
                if a == b:
                    continue
                key = f"cmp|{min(a, b)}|{max(a, b)}"
                ans = a > b if kind == "gt" else a < b
                q = rng.choice(CMP_T[kind]).format(a=a, b=b)
            elif kind in ("even", "odd"):
                a = rng.randint(0, 199)
                key = f"par|{a}"
                ans = (a % 2 == 0) == (kind == "even")
                q = rng.choice(CMP_T[kind]).format(a=a)
            else:
                a, b = rng.randint(0, 20), rng.randint(0, 20)
                c = a + b if rng.random() < 0.5 else a + b + rng.choice([-3, -2, -1, 1, 2, 3])
                if c < 0:
                    continue
                key = f"sum|{min(a, b)}|{max(a, b)}"
                ans = c == a + b
                q = rng.choice(CMP_T["sum"]).format(a=a, b=b, c=c)
        if (h(key) % 10 == 0) != held:
            continue
        user = USER_TEMPLATES["yesno"].format(question=q)
        return {"task": "yesno", "system": SYSTEMS["yesno"], "user": user,
                "answer": "Yes." if ans else "No."}
    raise RuntimeError("yesno generator stuck")


def maybe_generic_system(ex, rng):
    """15% of training examples use a generic system prompt for robustness."""
    if rng.random() < 0.15:
        ex = dict(ex)
        ex["system"] = "You are a helpful assistant."
    return ex


# --------------------------------------------------------------------------
def train_tokenizer(texts, model_prefix, vocab_size):
    import sentencepiece as spm
    os.makedirs(os.path.dirname(model_prefix), exist_ok=True)
    tmp = model_prefix + ".train.txt"
    with open(tmp, "w", encoding="utf-8") as f:
        for t in texts:
            for line in t.split("\n"):
                if line:
                    f.write(line + "\n")
    spm.SentencePieceTrainer.train(
        input=tmp, model_prefix=model_prefix, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, split_digits=True, character_coverage=0.9999,
        normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, user_defined_symbols=[IM_START, IM_END],
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=2000000,
        shuffle_input_sentence=True, num_threads=2, minloglevel=2)
    os.remove(tmp)


# v2 task mix: relative shares of the task tokens (stories are the rest); multi:
# multi-turn conversations, copy: tasks_v2.gen_copy (training only). --mix overrides.
V2_MIX = {"classify": 3, "extract": 3, "yesno": 2, "tools": 4, "schema": 2, "multi": 2, "copy": 3}


def parse_mix(text):
    """'yesno=6,copy=1' -> V2_MIX with those weights replaced; SystemExit on a
    name V2_MIX lacks or a weight that is not a number >= 0."""
    mix = dict(V2_MIX)
    for item in filter(None, text.split(",")):
        name, _, w = item.partition("=")
        try:
            weight = float(w)
        except ValueError:
            weight = -1.0
        if name not in mix or weight < 0:
            sys.exit(f"make_data.py: --mix {item!r}: want NAME=WEIGHT, NAME one of {', '.join(mix)}")
        mix[name] = weight
    return mix


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/work/ilpd-train/data")
    ap.add_argument("--models", default=os.path.join(REPO, "models"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--epochs", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--heldout-stories", type=int, default=116)
    ap.add_argument("--heldout-per-task", type=int, default=200)
    ap.add_argument("--task-frac", type=float, default=0.5, help="fraction of tokens from tasks")
    ap.add_argument("--skip-tokenizer", action="store_true")
    ap.add_argument("--recipe", choices=("v1", "v2"), default="v1",
                    help="v2: tasks_v2's phrasings, tools and schema JSON (demo model v2)")
    ap.add_argument("--mix", default="",
                    help="v2: task weights to change, e.g. yesno=6,copy=1 (V2_MIX has the rest)")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(os.path.join(args.models, "heldout"), exist_ok=True)

    stories = load_stories()
    n_held = args.heldout_stories
    train_st, held_st = stories[:-n_held], stories[-n_held:]
    print(f"stories: {len(train_st)} train, {len(held_st)} held-out")

    # ---- held-out sets ------------------------------------------------------
    hrng = random.Random(args.seed + 7777)
    if args.recipe == "v2":
        import tasks_v2
        held_gens = [(t, lambda t=t: tasks_v2.GENERATORS[t](hrng, "held")) for t in tasks_v2.GENERATORS]
    else:
        Ph = Pools(held=True)
        held_gens = [("classify", lambda: gen_classify(hrng, Ph)), ("extract", lambda: gen_extract(hrng, Ph)),
                     ("yesno", lambda: gen_yesno(hrng, True))]
    held = {"story": [gen_story(s, hrng, exact=True) for s in held_st]}
    seen = set()
    for task, fn in held_gens:
        held[task] = []
        while len(held[task]) < args.heldout_per_task:
            ex = fn()
            if ex["user"] in seen:
                continue
            seen.add(ex["user"])
            held[task].append(ex)
    held_users = {ex["user"] for v in held.values() for ex in v}
    for task, exs in held.items():
        with open(os.path.join(args.models, "heldout", f"{task}.jsonl"), "w") as f:
            for ex in exs:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")

    # ---- training examples per epoch -----------------------------------------
    if args.recipe == "v2":
        make = {t: (lambda r, g=g: g(r, "train")) for t, g in tasks_v2.GENERATORS.items()}
        make["multi"] = lambda r: tasks_v2.multi_turn(r, "train", r.randint(2, 8))
        make["copy"] = lambda r: tasks_v2.gen_copy(r, "train")
        gens = [(t, make[t], w) for t, w in parse_mix(args.mix).items() if w > 0]
    else:
        Pt = Pools(held=False)
        gens = [("classify", lambda r: gen_classify(r, Pt), 1), ("extract", lambda r: gen_extract(r, Pt), 1),
                ("yesno", lambda r: gen_yesno(r, False), 1)]
    story_chars = sum(len(s) for s in train_st)
    weight_sum = sum(w for _, _, w in gens)

    def epoch_examples(e):
        rng = random.Random(args.seed * 1000 + e)
        exs = [maybe_generic_system(gen_story(s, rng), rng) for s in train_st]
        # tasks: chars per task kind by weight, total ~ story chars * frac/(1-frac)
        target = story_chars * args.task_frac / (1 - args.task_frac)
        for name, g, w in gens:
            c = 0
            while c < target * w / weight_sum:
                ex = g(rng)
                if ex["user"] in held_users:
                    continue
                if args.recipe == "v1":
                    ex = maybe_generic_system(ex, rng)
                exs.append(ex)
                c += (len(ex["answer"]) + len(ex["user"]) + len(ex["system"]) + 60
                      + sum(len(u) + len(a) + 40 for u, a in ex.get("history", ())))
        rng.shuffle(exs)
        return exs

    ep0 = epoch_examples(0)
    tok_prefix = os.path.join(args.models, "tokenizer")
    if not args.skip_tokenizer:
        train_tokenizer([render(ex) for ex in ep0], tok_prefix, args.vocab)
        try:
            os.remove(tok_prefix + ".vocab")
        except OSError:
            pass
    tok = Tokenizer(tok_prefix + ".model")
    print(f"tokenizer: vocab {tok.vocab_size}, im_start {tok.im_start}, im_end {tok.im_end}"
          f" ({time.time()-t0:.0f}s)")
    # sanity: segment-wise encoding == SentencePiece whole-string encoding
    for ex in ep0[:200]:
        txt = render(ex)
        assert tok.encode_chat_text(txt) == tok.sp.encode(txt), txt[:200]

    out_path = os.path.join(args.out, "train.bin")
    tot = {}
    n_docs = 0
    with open(out_path + ".tmp", "wb") as f:
        for e in range(args.epochs):
            exs = ep0 if e == 0 else epoch_examples(e)
            ids = tok.sp.encode([render(ex) for ex in exs])  # whole-string == segment-wise
            buf = []
            for ex, x in zip(exs, ids):
                buf.append(tok.bos)
                buf.extend(x)
                if e == 0:
                    tot[ex["task"]] = tot.get(ex["task"], 0) + len(x) + 1
            n_docs += len(exs)
            np.asarray(buf, dtype=np.uint16).tofile(f)
            if e == 0:
                print(f"epoch 0 tokens by task: {tot}  total {sum(tot.values())}")
            print(f"epoch {e}: {len(exs)} docs, {len(buf)} tokens ({time.time()-t0:.0f}s)",
                  flush=True)
    os.replace(out_path + ".tmp", out_path)

    # held-out token stream for the loss log
    hbuf = []
    for task in held:
        for ex in held[task]:
            hbuf.append(tok.bos)
            hbuf.extend(tok.encode_chat_text(render(ex)))
    np.asarray(hbuf, dtype=np.uint16).tofile(os.path.join(args.out, "heldout.bin"))
    meta = {"seed": args.seed, "epochs": args.epochs, "docs": n_docs,
            "tokens": int(os.path.getsize(out_path) // 2), "epoch0_tokens_by_task": tot,
            "heldout_tokens": len(hbuf), "vocab": tok.vocab_size,
            "train_stories": len(train_st), "heldout_stories": len(held_st),
            "assistant_header": tok.encode_chat_text(IM_START + "assistant\n"), "im_end": tok.im_end}
    json.dump(meta, open(os.path.join(args.out, "meta.json"), "w"), indent=1)
    tasks = {t: {"system": SYSTEMS[t], "user": USER_TEMPLATES[t]} for t in USER_TEMPLATES}
    with open(os.path.join(args.models, "tasks.json"), "w") as f:
        json.dump(tasks, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(json.dumps(meta))
    # a few samples for eyeballing
    with open(os.path.join(args.out, "samples.txt"), "w") as f:
        for ex in ep0[:40]:
            f.write(render(ex) + "\n---\n")


if __name__ == "__main__":
    main()
