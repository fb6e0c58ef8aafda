"""Demo model v2 tasks: many phrasings per intent, unseen-template held-out
splits, tool calling and schema-following JSON (make_data.py --recipe v2).

Every generator takes (rng, split) with split "train" or "held". Held-out
examples differ from training ones in the template itself, not only in the
fillers: each template list is split by index (every 4th template is held
out), and the entity pools of make_data.Pools are split as in v1.

Example shape (chat.render understands it):
  {"task", "system", "user", "answer", "history": [[user, answer], ...]?,
   "meta": {...}?}  meta carries what the evaluation checks (the expected
   category, fields, tool name and arguments).

Tools are rendered exactly as engine/chat.c renders them for the ChatML
family (Qwen2.5's Hermes convention), so a request with `tools` through the
server sees the text the model was trained on: tools_system() below and
TOOL_NOTE are the two places to keep in step with chat.c.
"""
import json

from make_data import (CLASSIFY_T, CLOSERS, EXTRACT_NODATE, EXTRACT_T, MONTHS, OPENERS, Pools,
                       date_str, fill, fmt_money, money, order_number, rand_date)


def held_split(items, split, every=4, phase=1):
    """Every EVERY-th item (from PHASE) is held out; the rest trains."""
    held = split == "held"
    return [x for i, x in enumerate(items) if (i % every == phase) == held]


def pools(split):
    return Pools(held=split == "held")


# --------------------------------------------------------------------------
# Surface noise: case, typos, punctuation, spacing. PROTECT holds substrings
# (order numbers, amounts, dates) that must survive unchanged.
# --------------------------------------------------------------------------
def typo(word, rng):
    i = rng.randrange(len(word) - 1)
    k = rng.randrange(3)
    if k == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if k == 1:
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def noisy(text, rng, protect=()):
    words = text.split(" ")
    rate = rng.choice([0.0, 0.0, 0.02, 0.05, 0.1])
    out = []
    for w in words:
        if rate and w.isalpha() and len(w) > 3 and not any(w in p for p in protect) and rng.random() < rate:
            w = typo(w, rng)
        out.append(w)
    s = " ".join(out)
    r = rng.random()
    if r < 0.15:
        s = s.lower()
    elif r < 0.2:
        s = s.upper() if not protect else s
    if rng.random() < 0.2:
        s = s.rstrip(".!?")
    if rng.random() < 0.1:
        s = s.replace(". ", ".  ")
    for p in protect:  # case changes must not touch the values
        low = s.lower().find(p.lower())
        if low >= 0:
            s = s[:low] + p + s[low + len(p):]
    return s


# --------------------------------------------------------------------------
# classify: v1's 41 templates plus paraphrases in other registers
# --------------------------------------------------------------------------
CLASSIFY_T2 = CLASSIFY_T + [
    ("shipping", 0.9, "hey where's my stuff?? ordered the {product} {when}, still nothing"),
    ("shipping", 0.9, "Tracking for {order} has said 'in transit' for a week now."),
    ("shipping", 0.8, "I moved to {place}. Can the {product} go to my new address instead?"),
    ("shipping", 0.9, "Could you tell me the delivery date for order {order}?"),
    ("shipping", 0.95, "My parcel is lost. {carrier} says they handed it over but I have nothing."),
    ("shipping", 0.8, "Is it possible to pick up the {product} in store instead of waiting for delivery?"),
    ("shipping", 0.9, "The box for order {order} arrived without the {product} inside, only the packing slip, and the courier marked it delivered {when}."),
    ("shipping", 0.9, "Do you ship to {place}?"),
    ("returns", 0.9, "the {product} is too small, how do i send it back"),
    ("returns", 0.95, "I would like my money back for the {product}, I am returning it."),
    ("returns", 0.9, "Can I exchange order {order} for a different size?"),
    ("returns", 0.8, "Bought the {product} as a gift and they already have one. What now?"),
    ("returns", 0.9, "Where do I drop off a return? It's the {product} from order {order}."),
    ("returns", 0.95, "Return request: {product}, order {order}, unused and in the original box."),
    ("returns", 0.9, "I sent the {product} back to you {when}. When will the refund show up?"),
    ("returns", 0.8, "I changed my mind about the {color} {product}, can I undo the purchase?"),
    ("product", 0.9, "how many watts is the {product}"),
    ("product", 0.95, "Can you explain how the warranty on the {product} works?"),
    ("product", 0.9, "Is the {product} safe to put in the dishwasher?"),
    ("product", 0.8, "The {product} arrived fine but the button on top is loose."),
    ("product", 0.9, "Which {product} would you recommend for a small apartment?"),
    ("product", 0.9, "What material is the {product} made of?"),
    ("product", 0.95, "Is there a newer model of the {product} coming out?"),
    ("product", 0.8, "My {product} will not turn on even after charging it all night."),
    ("payment", 0.9, "you charged my card {amount} twice!!"),
    ("payment", 0.95, "Can I change the payment method on order {order} to {pay}?"),
    ("payment", 0.9, "The checkout page keeps saying 'payment failed' for the {product}."),
    ("payment", 0.9, "Why is there a pending charge of {amount} on my account?"),
    ("payment", 0.8, "My bank says the payment of {amount} went through but your site says unpaid."),
    ("payment", 0.95, "Do you accept {pay} for orders over {amount}?"),
    ("payment", 0.9, "Please send me a receipt for the {amount} I paid."),
    ("payment", 0.9, "Was sales tax included in the {amount} you charged me?"),
]
CLASSIFY_ASK = [
    "Classify this customer message as shipping, returns, product or payment.\nMessage: {message}",
    "Which category does this message belong to: shipping, returns, product or payment?\nMessage: {message}",
    "{message}\n\nCategorize the message above as shipping, returns, product or payment.",
    "Label the ticket (shipping / returns / product / payment).\n\n{message}",
    "Customer wrote: \"{message}\"\nWhat is the category? Options: shipping, returns, product, payment.",
    "Sort this into shipping, returns, product or payment: {message}",
    "Message from a customer:\n{message}\nGive the category (shipping, returns, product, payment) as JSON.",
    "classify: {message}",
]
SYS_CLASSIFY = ["You are a customer support assistant. Classify the message. Reply only with JSON.",
                "You route support tickets. Answer with JSON only.",
                "You are a helpful assistant."]


# Training-only variety: intent clauses per category, freely combined with
# category-neutral context sentences, so that the model learns what each
# category is about rather than which template it saw. Written without the
# held-out templates' telling words (watts, dimensions, swap, drop off...), so
# that the held-out split stays unseen. The second part of each list was
# written from an intent list (15 intents a category, 3 phrasings each) by a
# writer shown only the category definitions and the first part; its clauses
# with a word that only the held-out templates use were then left out
# (tests/t_train_data.py checks both).
CLASSIFY_BANK = {
    "shipping": [
        "when will my order get here", "the courier never came", "my delivery is late",
        "the tracking number does not work", "can you ship it faster",
        "the package was left at the wrong door", "is express delivery available",
        "my order has not been shipped yet", "the parcel says delivered but it is not here",
        "{carrier} keeps rescheduling the delivery", "please change the delivery address",
        "the box arrived crushed and half open", "how much is shipping to {place}",
        "can I track order {order}", "nobody has picked up my package from the warehouse",
        "the delivery window was missed again", "will it arrive before the weekend",
        "I was not home when the driver came", "the shipment is stuck at customs",
        "only one of my two packages arrived",
        # intents listed by a writer who had not seen the held-out templates
        "roughly how long does delivery take to {place}", "any idea what day order {order} shows up",
        "hello, when my parcel will be arrive please", "tracking hasn't moved in days",
        "the tracking page has said the same thing since {when}",
        "why is there still no tracking info for order {order}", "has my order even left your warehouse",
        "I ordered {when} and it still says not dispatched", "when do you actually send out order {order}",
        "I moved, can the parcel go to my new address instead",
        "wrong postcode on my order, please fix it before it ships",
        "can I redirect the package to my office in {place}", "why is delivery so expensive to {place}",
        "how much do I need to spend to get free delivery", "what does standard delivery cost",
        "is there next day delivery", "can I upgrade my order to express shipping",
        "any quicker shipping option, it is for a birthday", "do you ship to {place}",
        "can you send orders abroad at all", "is delivery possible outside the country",
        "app says delivered, my doorstep says otherwise",
        "tracking shows delivered {when} but there is no parcel anywhere",
        "my parcel seems to have vanished somewhere in transit", "please open a trace for my missing shipment",
        "order {order} was supposed to be here days ago", "this delivery is taking forever",
        "why is my package so much slower than the date you promised",
        "can you send it with {carrier} instead", "is it coming by normal post or by courier",
        "I missed the driver, how do I rebook the delivery",
        "can I collect the parcel from a pickup point instead",
        "where do I pick up the package after the failed delivery attempt",
        "is the rest of order {order} still on the way", "why did my order come in three separate deliveries",
        "do you ship all the items together or one by one", "my parcel is held at customs, what now",
        "can the driver leave it with my neighbour", "please leave the box behind the gate if nobody answers",
        "can I add a door code for the courier"],
    "returns": [
        "I want to return the {product}", "how do I get my money back",
        "please refund my order", "the return label did not print",
        "I received the wrong item and want to send it back",
        "can I exchange the {product} for another size", "what is your return policy",
        "my refund has not arrived yet", "I sent the package back weeks ago",
        "the {product} does not fit and I want a refund",
        "is there a fee for returning order {order}", "I would like to cancel and return this",
        "how many days do I have to return the {product}", "the refund was less than I paid",
        "I want to exchange it for the {color} version", "please take the {product} back",
        "do I need the original box for a return", "I never got my store credit for the return",
        "can I return a gift without the receipt", "I want to give back the {product} and get a refund",
        # intents listed by a writer who had not seen the held-out templates
        "how do I start a return", "is it too late to return something I bought {when}",
        "how long is the return period", "can I still send the {product} back after thirty days",
        "do I have to pay the postage to send it back", "is sending a return free",
        "why should I pay to ship back your mistake", "can you email me a return label",
        "do you collect returns or must I take it to the post office myself",
        "still waiting on the refund for order {order}", "when will I see the money for my return",
        "you got my return ages ago and still no refund", "will the refund go back on the same card",
        "can my refund go to a different account", "I paid with {pay}, how will the refund reach me",
        "can I change the {color} one for a different colour", "exchange please, wrong size",
        "I would rather have the {product2}, can we do an exchange",
        "can I send this back and get another model instead", "can I have store credit instead of a refund",
        "how do I spend the credit from my return",
        "my store credit from the return is not showing on my account",
        "can I return something bought in the clearance", "is the {product} final sale or can it go back",
        "I got the {product} as a present, can I return it",
        "how do I return a gift without the buyer finding out",
        "can the refund for a gift go to me and not the person who ordered it",
        "you deducted money from my return refund for no reason",
        "I did not get the full refund back for the {product}", "did my returned parcel reach you",
        "can you confirm you got my return", "how do I know the return arrived at your warehouse",
        "can I return the {product} if I already opened it", "I used it once, can I still send it back",
        "the packaging is torn, will you still accept the return",
        "I changed my mind about the {product} and want to return it", "dont want it anymore, can I return",
        "ordered this by mistake, I want to send it back"],
    "product": [
        "does the {product} have a timer", "is the {product} waterproof",
        "my {product} stopped working", "the {product} makes a strange noise",
        "how do I clean the {product}", "what batteries does the {product} use",
        "is the {product} compatible with my old one", "the manual for the {product} is missing",
        "how long does the {product} battery last", "the screen on the {product} is flickering",
        "can the {product} be used outside", "is the {product} easy to set up",
        "what comes in the box with the {product}", "the {product} gets too hot",
        "is the {product} in stock again", "how heavy is the {product}",
        "the handle of the {product} broke", "does the {product} work in {place}",
        "what is the difference between the {product} and the {product2}",
        "how loud is the {product}",
        # intents listed by a writer who had not seen the held-out templates
        "how much does the {product} hold", "what is the {product} made of",
        "is the {product} real leather or fake", "does the {product} contain any plastic",
        "will the {product} work with my phone", "does the {product} fit the {product2}",
        "is the {product} ok for the electric in {place}", "how do I put the {product} together",
        "the instructions for the {product} make no sense",
        "what is the first step after unpacking the {product}", "can the {product} go in the dishwasher",
        "how should I store the {product} in winter", "what can I wash the {product} with without ruining it",
        "is there a size chart for the {product}", "when will the {color} {product} be back",
        "is the {product} being discontinued", "can you tell me if the {product} will come again in my size",
        "is the new {product} much different from the old model", "what do I get extra with the {product2}",
        "the {product} won't turn on", "the {product} broke after one week of normal use, this is ridiculous",
        "the button on the {product} is stuck", "do you sell a spare lid for the {product}",
        "where can I get a replacement filter for the {product}",
        "can I use the {product} if I have a nut allergy", "is the {product} fine to use around pets",
        "the {product} will not connect to wifi", "how do I pair the {product} with bluetooth",
        "is there an app for the {product}",
        "what colours does the {product} have", "is the {color} one the same shade as in the photos",
        "the {product} stops charging at half", "how long does the {product} take to charge fully",
        "can the {product} run on mains power or only battery", "where is the {product} made",
        "is the {product} certified organic", "is the {product} vegan and cruelty free"],
    "payment": [
        "I was charged the wrong amount", "my card was declined",
        "can I get an invoice for order {order}", "I paid but the order says pending",
        "please remove the extra charge of {amount}", "do you take {pay}",
        "the price went up after I paid", "my coupon was not applied",
        "I see two payments of {amount}", "how do I change my billing address",
        "the charge of {amount} is not mine", "can I pay for the {product} later",
        "why did my bank block the payment", "I want a receipt for {amount}",
        "the total at checkout was wrong", "can I pay part with a gift card",
        "I was billed for an order I cancelled", "the payment page will not load",
        "is my card saved on the account", "the tax on my bill looks too high",
        # intents listed by a writer who had not seen the held-out templates
        "please, how I can pay if I have no credit card",
        "payment keeps failing at checkout", "it says transaction error every time I try to pay",
        "why was my {pay} payment rejected", "I was charged twice for order {order}",
        "my card got billed two times for one purchase", "you took the money twice, fix it now",
        "I do not recognise a payment to your shop", "I need a company invoice with our tax number",
        "can you put my business name on the invoice",
        "the invoice for order {order} has the wrong name on it", "I never got a receipt by email",
        "where can I download my receipt", "could you resend the payment confirmation for order {order}",
        "my discount code says invalid", "the promo code expired while I was paying",
        "can I use two coupons on one order", "do you price match other shops",
        "the {product} was cheaper yesterday, why did I pay more", "why was vat added at checkout",
        "can I buy without sales tax if I am a business", "the tax was counted twice on my bill",
        "can I split the payment into monthly instalments", "do you offer buy now pay later",
        "is there interest if I pay over three months", "how do I update my card details",
        "my card expired, where do I put the new one", "I want to change the card on my account",
        "my gift card code will not work", "can I buy a gift card for {amount}",
        "can I pay in my own currency", "my bank added a foreign transaction fee, why",
        "there is a hold of {amount} on my card", "the payment still shows as pending at my bank",
        "why is money reserved on my account when I did not finish the order", "how do I delete my saved card",
        "I do not want my card stored, please remove it"],
}
CLASSIFY_CONTEXT = [
    "I ordered the {product} {when}.", "My order number is {order}.", "It was a gift for my sister.",
    "I live in {place}.", "This is about the {color} {product}.", "I have shopped with you for years.",
    "This is my second message about this.", "The order was {order}.", "I bought it {when}.",
    "It cost {amount}.", "I am not angry, just confused."]


CLASSIFY_BANK_SHARE = 0.5  # of the training classify examples


def classify_bank_message(rng):
    """A message from CLASSIFY_BANK: its category, its text (before filling)."""
    cat = rng.choice(sorted(CLASSIFY_BANK))
    parts = [s[0].upper() + s[1:] + rng.choice([".", "?", "!", ""]) for s in
             rng.sample(CLASSIFY_BANK[cat], rng.choice([1, 1, 2]))]
    for _ in range(rng.choice([0, 1, 1, 2])):
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(CLASSIFY_CONTEXT))
    return cat, " ".join(parts)


def gen_classify(rng, split):
    P = pools(split)
    if split == "train" and rng.random() < CLASSIFY_BANK_SHARE:
        cat, t = classify_bank_message(rng)
        conf = 0.9
    else:
        cat, conf, t = rng.choice(held_split(CLASSIFY_T2, split))
    op, cl = rng.choice(OPENERS), rng.choice(CLOSERS)
    if op.endswith(", "):
        t = t[0].lower() + t[1:]
    msg = noisy(fill(op + t + cl, rng, P), rng)
    user = rng.choice(held_split(CLASSIFY_ASK, split)).format(message=msg)
    ans = json.dumps({"category": cat, "confidence": conf})
    return {"task": "classify", "system": rng.choice(SYS_CLASSIFY), "user": user, "answer": ans,
            "meta": {"category": cat}}


# --------------------------------------------------------------------------
# extract: more templates, more value formats
# --------------------------------------------------------------------------
EXTRACT_T2 = EXTRACT_T + [
    "order {order}, paid {amount} on {date}. still waiting",
    "I'm writing about my purchase from {date}. Order no. {order}, total was {amount}.",
    "Total {amount} | Order {order} | Date {date} | Item: {product}",
    "On {date} my card was charged {amount} for order {order}; the {product} never came.",
    "Order ID {order} - {amount} - {date}. Please advise.",
    "It was {date} when I ordered the {product}. I paid {amount}. My order is {order}.",
    "Hello! The order {order} I made on {date} ({amount}) has a problem with the {product}.",
    "Refund please: {order}, {amount}, bought {date}",
]
EXTRACT_NODATE2 = EXTRACT_NODATE + [
    "order {order} - {amount} - the {product} is broken",
    "I was charged {amount} for {order}, can you check why?",
    "Hi, {order} cost me {amount} and I want to cancel it.",
]
EXTRACT_ASK = [
    "Extract the order number, date and amount from this message as JSON.\nMessage: {message}",
    "Pull out order_number, date (YYYY-MM-DD) and amount from the message below.\n\n{message}",
    "{message}\n\nGive me the order number, the date and the amount as JSON.",
    "From this customer email, extract the order details as JSON: {message}",
    "Message: {message}\nReturn JSON with order_number, date and amount.",
    "What are the order number, date and amount here? {message}",
    "Parse the order info (order_number, date, amount) from: \"{message}\"",
    "extract order details -> json\n{message}",
]
SYS_EXTRACT = ["You are a customer support assistant. Extract the order details. Reply only with JSON.",
               "You turn customer emails into structured data. Reply only with JSON.",
               "You are a helpful assistant."]


def ordinal(d):
    return f"{d}{'th' if 10 <= d % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"


def fmt_date2(rng, y, m, d):
    k = rng.randrange(9)
    if k < 5:
        return date_str(k, y, m, d)
    if k == 5:
        return f"{MONTHS[m-1]} {ordinal(d)}, {y}"
    if k == 6:
        return f"the {ordinal(d)} of {MONTHS[m-1]} {y}"
    if k == 7:
        return f"{y}/{m:02d}/{d:02d}"
    return f"{MONTHS[m-1][:3].lower()} {d} {y}"


def order_number2(rng):
    k = rng.random()
    if k < 0.8:
        return order_number(rng)
    if k < 0.9:
        return f"ORD-{rng.randint(2022, 2025)}-{rng.randint(1000, 99999)}"
    return f"#{rng.randint(10000, 9999999)}"


def fmt_money2(rng, v):
    if v >= 1000 and rng.random() < 0.5:
        return f"${v:,.2f}"
    return fmt_money(rng, v)


def gen_extract(rng, split):
    P = pools(split)
    y, m, d = rand_date(rng)
    amt = money(rng, 5, 2000)
    order = order_number2(rng)
    nodate = rng.random() < 0.12
    t = rng.choice(held_split(EXTRACT_NODATE2 if nodate else EXTRACT_T2, split))
    ds, ms = fmt_date2(rng, y, m, d), fmt_money2(rng, amt)
    msg = t.format(order=order, date=ds, amount=ms, product=rng.choice(P.products))
    op, cl = rng.choice(OPENERS[:6]), rng.choice(CLOSERS)
    if op.endswith(", "):
        msg = msg[0].lower() + msg[1:]
    msg = noisy(op + msg + cl.format(name=rng.choice(P.names)), rng, protect=(order, ds, ms))
    ans = {"order_number": order, "date": None if nodate else f"{y}-{m:02d}-{d:02d}", "amount": amt}
    user = rng.choice(held_split(EXTRACT_ASK, split)).format(message=msg)
    return {"task": "extract", "system": rng.choice(SYS_EXTRACT), "user": user, "answer": json.dumps(ans),
            "meta": ans}


# --------------------------------------------------------------------------
# yes/no: v1's questions with more phrasings (held out by phrasing)
# --------------------------------------------------------------------------
YESNO_WRAP = ["{q}", "{q}", "Quick question: {q}", "{q} Answer yes or no.", "I wonder... {q}",
              "Please answer: {q}", "{q} Just yes or no please.", "Hey, {ql}"]


def gen_yesno(rng, split):
    from make_data import gen_yesno as v1
    ex = v1(rng, split == "held")
    q = ex["user"]
    w = rng.choice(held_split(YESNO_WRAP, split))
    user = noisy(w.format(q=q, ql=q[0].lower() + q[1:]), rng)
    sysp = rng.choice(["Answer the question with Yes. or No.", "Reply with Yes. or No. only.",
                       "You are a helpful assistant."])
    return {"task": "yesno", "system": sysp, "user": user, "answer": ex["answer"],
            "meta": {"answer": ex["answer"]}}


# --------------------------------------------------------------------------
# Tools. Each tool: its definition (the OpenAI shape chat.c prints) and
# request templates whose slots become the arguments, in schema order.
# --------------------------------------------------------------------------
def obj(props, required):
    return {"type": "object", "properties": props, "required": required}


S = {"type": "string"}
CITIES = ["Paris", "Tokyo", "Berlin", "Lagos", "Lima", "Oslo", "Austin", "Cairo", "Seoul", "Quebec",
          "Dublin", "Madrid", "Nairobi", "Denver", "Hanoi", "Porto", "Krakow", "Perth", "Manila", "Boston"]
TOPICS = ["call the dentist", "buy milk", "send the report", "water the plants", "pay rent",
          "pick up the kids", "book flights", "renew my passport", "feed the cat", "back up the laptop"]
TIMES = ["9:00", "7:30", "18:45", "12:15", "21:00", "8:05", "16:20", "10:40"]
CURR = ["USD", "EUR", "GBP", "JPY", "CAD", "CHF", "INR", "AUD"]
TOOLS = [
    {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": obj({"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
     "asks": ["What's the weather in {city}?", "Is it raining in {city} right now?",
              "how hot is it in {city} today", "Weather for {city} in {unit}, please.",
              "Do I need a jacket in {city}?", "Tell me the temperature in {city} in {unit}.",
              "{city} weather?", "Can you check the forecast for {city}?"]},
    {"name": "get_order_status", "description": "Look up the status of an order by its number.",
     "parameters": obj({"order_number": S}, ["order_number"]),
     "asks": ["Where is my order {order_number}?", "Status of order {order_number}?",
              "Has {order_number} shipped yet?", "can you track {order_number} for me",
              "I'd like an update on order {order_number}.", "Check order {order_number} please."]},
    {"name": "create_return", "description": "Start a return for an order.",
     "parameters": obj({"order_number": S, "reason": S}, ["order_number", "reason"]),
     "asks": ["I want to return order {order_number} because it {reason}.",
              "Return {order_number}: it {reason}.", "Please start a return for {order_number}, it {reason}.",
              "order {order_number} {reason}, I want to send it back",
              "Can I return {order_number}? It {reason}."]},
    {"name": "search_products", "description": "Search the catalogue.",
     "parameters": obj({"query": S, "max_price": {"type": "number"}}, ["query"]),
     "asks": ["Find me a {query} under {max_price} dollars.", "Do you sell a {query}?",
              "Search for {query} cheaper than ${max_price}.", "show me {query} options",
              "I'm looking for a {query}, budget {max_price}.", "Any {query} in stock?"]},
    {"name": "convert_currency", "description": "Convert an amount between currencies.",
     "parameters": obj({"amount": {"type": "number"}, "from": S, "to": S}, ["amount", "from", "to"]),
     "asks": ["Convert {amount} {from} to {to}.", "How much is {amount} {from} in {to}?",
              "{amount} {from} -> {to}?", "What do {amount} {from} come to in {to}?",
              "change {amount} {from} into {to}"]},
    {"name": "set_reminder", "description": "Set a reminder at a time of day.",
     "parameters": obj({"time": S, "text": S}, ["time", "text"]),
     "asks": ["Remind me to {text} at {time}.", "Set a reminder for {time}: {text}.",
              "at {time} remind me to {text}", "Please remind me at {time} to {text}.",
              "Don't let me forget to {text}, {time}."]},
    {"name": "book_table", "description": "Book a restaurant table.",
     "parameters": obj({"restaurant": S, "people": {"type": "integer"}, "time": S},
                       ["restaurant", "people", "time"]),
     "asks": ["Book a table at {restaurant} for {people} at {time}.",
              "Table for {people} at {restaurant}, {time} please.",
              "Can you reserve {restaurant} for {people} people at {time}?",
              "get us a table for {people} at {restaurant} around {time}"]},
    {"name": "send_email", "description": "Send an email.",
     "parameters": obj({"to": S, "subject": S}, ["to", "subject"]),
     "asks": ["Email {to} about {subject}.", "Send a mail to {to} with the subject {subject}.",
              "write to {to}: subject {subject}", "Please email {to} regarding {subject}."]},
]
RESTAURANTS = ["Luigi's", "the Green Bowl", "Sakura", "Casa Lola", "the Old Mill", "Blue Door",
               "Pho 88", "Kebab House", "Chez Marie", "the Harbour Grill"]
REASONS = ["arrived broken", "is the wrong size", "stopped working", "was not what I ordered",
           "is missing parts", "came too late"]
EMAILS = ["anna@example.com", "ben.k@example.org", "sales@shop.example", "tom@example.net",
          "hr@company.example", "maya.r@example.com"]
SUBJECTS = ["the meeting", "my invoice", "the trip", "next week", "the contract", "lunch"]
QUERIES = ["rain jacket", "desk lamp", "yoga mat", "coffee maker", "phone charger", "backpack",
           "air fryer", "wool sweater", "tent", "headphones"]


def tool_slots(name, rng, P):
    """Returns the argument values of one request for tool NAME."""
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "unit": rng.choice(["celsius", "fahrenheit"])}
    if name in ("get_order_status", "create_return"):
        return {"order_number": order_number(rng), "reason": rng.choice(REASONS)}
    if name == "search_products":
        return {"query": rng.choice(QUERIES + P.products), "max_price": rng.choice([20, 50, 75, 100, 150, 300])}
    if name == "convert_currency":
        a, b = rng.sample(CURR, 2)
        return {"amount": rng.choice([10, 25, 40, 99.5, 120, 250, 1000]), "from": a, "to": b}
    if name == "set_reminder":
        return {"time": rng.choice(TIMES), "text": rng.choice(TOPICS)}
    if name == "book_table":
        return {"restaurant": rng.choice(RESTAURANTS), "people": rng.randint(1, 8), "time": rng.choice(TIMES)}
    return {"to": rng.choice(EMAILS), "subject": rng.choice(SUBJECTS)}


def tool_def(t):
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": t["parameters"]}}


def tools_system(system, tools, note=""):
    """The system turn chat.c renders for ChatML with TOOLS (json.dumps
    separators, one tool a line) and the tool_choice NOTE."""
    s = (system + "\n\n" if system else "") + (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
    for t in tools:
        s += "\n" + json.dumps(tool_def(t))
    s += ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
          "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
          "\"arguments\": <args-json-object>}\n</tool_call>")
    return s + ("\n\n" + note if note else "")


def tool_call_text(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _tool_choice(note):
    """The Messages tool_choice that tools_system's NOTE renders."""
    if note == "You must call at least one function.":
        return {"type": "any"}
    if note == "Call at most one function.":
        return {"type": "auto", "disable_parallel_tool_use": True}
    if note.startswith("You must call the function "):
        return {"type": "tool", "name": note[len("You must call the function "):-1]}
    return {"type": "auto"}


def messages_request(ex):
    """The Anthropic Messages request body that example EX stands for (its
    prompt as the server renders it; no max_tokens)."""
    r = ex.get("request")
    body = {"model": "ilpd-demo", "messages": []}
    if r is None:  # a plain or multi-turn conversation without tools
        if ex.get("system"):
            body["system"] = ex["system"]
        for u, a in ex.get("history", ()):
            body["messages"] += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        body["messages"].append({"role": "user", "content": ex["user"]})
        return body
    by_name = {t["name"]: t for t in TOOLS}
    if r["system"]:
        body["system"] = r["system"]
    body["tools"] = [{"name": n, "description": by_name[n]["description"], "input_schema": by_name[n]["parameters"]}
                     for n in r["tools"]]
    body["tool_choice"] = _tool_choice(r["note"])
    if "call" in r:
        body["messages"] = [
            {"role": "user", "content": ex["history"][0][0]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": r["call"]["name"],
                                               "input": r["call"]["input"]}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": r["result"]}]}]
    else:
        body["messages"] = [{"role": "user", "content": ex["user"]}]
    return body


TOOL_RESULT = {
    "get_weather": ("{{\"temperature\": {t}, \"conditions\": \"{c}\"}}", "It is {t} degrees and {c} in {city}."),
    "get_order_status": ("{{\"status\": \"{c}\"}}", "Order {order_number} is {c}."),
    "convert_currency": ("{{\"result\": {t}}}", "{amount} {from} is {t} {to}."),
}
NO_TOOL = ["Tell me a joke.", "What is your name?", "Thanks, that is all.", "Good morning!",
           "Who are you?", "ok bye"]


def gen_tools(rng, split):
    """A request with 1-4 tools on offer. 85%: the user asks for one of them
    and the answer is its call; otherwise a plain reply. 30% of calls with a
    result template get a second turn: the result, then a sentence."""
    P = pools(split)
    tools = rng.sample(TOOLS, rng.randint(1, min(4, len(TOOLS))))
    target = rng.choice(tools)
    note = rng.choice(["", "", "", "You must call at least one function.", "Call at most one function.",
                       f"You must call the function {target['name']}."])
    base = rng.choice(["", "", "You are a helpful assistant."])
    sysp = tools_system(base, tools, note)
    # the request that renders as this example (tests/t_demo_format.py checks it through the server)
    req = {"system": base, "tools": [t["name"] for t in tools], "note": note}
    if not note and rng.random() < 0.15:
        return {"task": "tools", "system": sysp, "user": noisy(rng.choice(NO_TOOL), rng),
                "answer": rng.choice(["Hello! How can I help you today?", "I can help with the tools listed."]),
                "meta": {"tool": None}, "request": req}
    v = tool_slots(target["name"], rng, P)
    ask = rng.choice(held_split(target["asks"], split, every=3, phase=2))
    user = noisy(ask.format(**v), rng, protect=tuple(str(x) for x in v.values()))
    props = target["parameters"]["properties"]
    args = {k: v[k] for k in props if k in target["parameters"]["required"] or "{" + k + "}" in ask}
    ex = {"task": "tools", "system": sysp, "user": user, "answer": tool_call_text(target["name"], args),
          "meta": {"tool": target["name"], "arguments": args}, "request": req}
    res = TOOL_RESULT.get(target["name"])
    if res and rng.random() < 0.3:
        fills = dict(v, t=rng.randint(-5, 35), c=rng.choice(["sunny", "cloudy", "shipped", "delivered"]))
        ex["history"] = [[user, ex["answer"]]]
        req.update(call={"name": target["name"], "input": args}, result=res[0].format(**fills))
        ex["user"] = "<tool_response>\n" + req["result"] + "\n</tool_response>"
        ex["answer"] = res[1].format(**fills)
        ex["meta"] = {"tool": None}
    return ex


# --------------------------------------------------------------------------
# JSON that follows a schema given in the system prompt (or asked for in
# words); the answer's keys come in the schema's order.
# --------------------------------------------------------------------------
FIELDS = {
    "name": lambda rng, P: rng.choice(P.names),
    "email": lambda rng, P: rng.choice(EMAILS),
    "product": lambda rng, P: rng.choice(P.products),
    "quantity": lambda rng, P: rng.randint(1, 12),
    "city": lambda rng, P: rng.choice(CITIES),
    "order_number": lambda rng, P: order_number(rng),
}
FIELD_TEXT = {"name": "My name is {v}.", "email": "You can reach me at {v}.", "product": "I want the {v}.",
              "quantity": "I need {v} of them.", "city": "I live in {v}.", "order_number": "It is about order {v}."}
SCHEMA_ASK = ["Reply only with JSON that follows this schema:\n{schema}",
              "Answer with a JSON object matching the schema {schema}",
              "Output JSON only. Schema: {schema}",
              "Fill in this JSON schema from the user's message: {schema}"]


def gen_schema(rng, split):
    P = pools(split)
    keys = rng.sample(list(FIELDS), rng.randint(2, 4))
    vals = {k: FIELDS[k](rng, P) for k in keys}
    props = {k: {"type": "integer"} if k == "quantity" else {"type": "string"} for k in keys}
    schema = json.dumps({"type": "object", "properties": props, "required": keys})
    sentences = [FIELD_TEXT[k].format(v=vals[k]) for k in keys]
    rng.shuffle(sentences)
    user = noisy(" ".join(sentences), rng, protect=tuple(str(v) for v in vals.values()))
    sysp = rng.choice(held_split(SCHEMA_ASK, split)).format(schema=schema)
    return {"task": "schema", "system": sysp, "user": user, "answer": json.dumps(vals), "meta": vals}


# --------------------------------------------------------------------------
# copy (training only, never held out or evaluated): repeat a string of
# random codes, or pick the one value of a kind out of a few. Extraction,
# tool arguments and schema values are copies of the prompt; a small model
# trained on the tasks alone answers with typical values instead (v1 and the
# first v2 runs: 0% exact extractions). Random strings cannot be memorised,
# so these examples reward looking the value up in the prompt.
# --------------------------------------------------------------------------
SYS_COPY = ["Repeat the text exactly.", "You copy text exactly. Reply with the text only.",
            "Return the requested value exactly as written.", "You are a helpful assistant."]
COPY_ASK = ["Repeat: {s}", "Copy this exactly: {s}", "Say back: {s}", "Echo the following.\n\n{s}",
            "{s}\n\nRepeat that."]
FIND_ASK = ["Which {kind} is in this message? {msg}", "What is the {kind} here?\n\n{msg}",
            "{msg}\n\nGive me the {kind} only."]
COPY_WORDS = ["blue", "river", "seven", "apple", "north", "silver", "paper", "lamp", "stone", "quiet",
              "orange", "window", "cloud", "garden", "rocket", "tiger", "pencil", "winter", "maple", "coffee"]


def _code(rng):
    L = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    pre = "".join(rng.choice(L) for _ in range(rng.randint(1, 3)))
    return f"{pre}-{rng.randint(10, 10 ** rng.randint(2, 7))}"


def _email(rng):
    name = "".join(rng.choice("abcdefghijklmnoprstuvwy") for _ in range(rng.randint(2, 7)))
    dom = rng.choice(["example.com", "example.org", "mail.example", "shop.example", "corp.example"])
    if rng.random() < 0.3:
        name += f"{rng.choice(['', '.', '_'])}{rng.randint(1, 99)}"
    return f"{name}@{dom}"


COPY_KINDS = {"order number": lambda r: order_number2(r) if r.random() < 0.5 else _code(r),
              "email address": _email,
              "amount": lambda r: fmt_money2(r, money(r, 1, 5000)),
              "date": lambda r: fmt_date2(r, *rand_date(r)),
              "number": lambda r: str(r.randint(0, 10 ** r.randint(1, 8))),
              "word": lambda r: r.choice(COPY_WORDS)}


def gen_copy(rng, split):
    kinds = list(COPY_KINDS)
    if rng.random() < 0.5:
        s = " ".join(COPY_KINDS[rng.choice(kinds)](rng) for _ in range(rng.randint(1, 6)))
        return {"task": "copy", "system": rng.choice(SYS_COPY), "user": rng.choice(COPY_ASK).format(s=s),
                "answer": s}
    picked = rng.sample(kinds[:5], rng.randint(1, 3))
    vals = {k: COPY_KINDS[k](rng) for k in picked}
    msg = " ".join(f"The {k} is {v}." for k, v in rng.sample(list(vals.items()), len(vals)))
    kind = rng.choice(picked)
    return {"task": "copy", "system": rng.choice(SYS_COPY),
            "user": rng.choice(FIND_ASK).format(kind=kind, msg=msg), "answer": vals[kind]}


GENERATORS = {"classify": gen_classify, "extract": gen_extract, "yesno": gen_yesno,
              "tools": gen_tools, "schema": gen_schema}


def multi_turn(rng, split, n):
    """N task turns in one conversation under a generic system prompt (longer
    documents, so the 2,048-token context is trained on real turns)."""
    turns = [GENERATORS[rng.choice(["classify", "extract", "yesno"])](rng, split) for _ in range(n)]
    last = turns[-1]
    return {"task": last["task"], "system": "You are a helpful assistant.", "user": last["user"],
            "answer": last["answer"], "history": [[t["user"], t["answer"]] for t in turns[:-1]],
            "meta": last.get("meta")}
