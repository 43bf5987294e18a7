"""WebShop: product categories and prompt constants.

Category rule: the reference's aggregation/distillation keyword table (variants A and
D, same order: apparel -> footwear -> home_decor -> electronics -> accessories -> beauty_health
-> other), but matched on **word boundaries** instead of substrings, so "laptop" no longer hits
"top", "stainless steel" no longer hits "tee" and "bowl" no longer hits "bow"
(substring false positives). A keyword also matches its plural (``shoes``, ``watches``).
"""
from __future__ import annotations

import re

ENV = "webshop"

#: Keyword table, in match order (variants A/D).
KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("apparel", ("shirt", "dress", "t-shirt", "polo", "pants", "jeans", "jacket", "coat", "sweater",
                 "blouse", "skirt", "shorts", "underwear", "swimsuit", "swimwear", "hoodie", "vest",
                 "cardigan", "suit", "blazer", "tee", "top")),
    ("footwear", ("shoe", "boot", "sandal", "sneaker", "slipper", "loafer", "heel", "flat", "oxford",
                  "pump", "moccasin", "flip-flop", "footwear")),
    ("home_decor", ("pillow", "curtain", "rug", "mat", "blanket", "bedding", "towel", "lamp", "decor",
                    "furniture", "cushion", "sheet", "tablecloth", "vase")),
    ("electronics", ("phone", "laptop", "tablet", "computer", "headphone", "earphone", "earbud",
                     "speaker", "charger", "cable", "mouse", "keyboard", "monitor", "camera",
                     "smartwatch", "battery", "electronic", "device", "gadget")),
    ("accessories", ("bag", "wallet", "belt", "hat", "cap", "scarf", "glove", "jewelry", "necklace",
                     "bracelet", "ring", "earring", "sunglasses", "glasses", "watch", "purse",
                     "backpack", "handbag", "tie", "bow")),
    ("beauty_health", ("makeup", "cosmetic", "skincare", "lotion", "cream", "shampoo", "conditioner",
                       "perfume", "cologne", "brush", "bathing", "soap", "body wash", "nail", "lipstick",
                       "mascara", "foundation", "serum", "moisturizer")),
)

CATEGORIES = tuple(c for c, _ in KEYWORDS) + ("other",)

#: The fixed buttons of WebShop's text pages, besides product ids and option values: every
#: bracketed item of the 300 ReAct WebShop episodes (shared real data, ``react-webshop``) that
#: is neither an id nor an option. There is no drop-down, filter, sort, cart or login (rule
#: ``missing_control``).
PAGE_BUTTONS = ("Search", "Back to Search", "< Prev", "Next >", "Description", "Features", "Reviews", "Buy Now")

#: First line of our WebShop agent prompt (our wording; the reference's differs, D-P7).
HEADER = "You are an expert shopping agent operating in the WebShop online store."

#: Turn instruction closing every WebShop prompt (our wording, same tag contract as ALFWorld).
TURN_INSTRUCTION = (
    "Now it's your turn to take one action for the current step.\nFirst reason step-by-step about "
    "which product and options best match the shopping goal, inside <think> </think> tags.\n"
    "Then give exactly one admissible action, such as search[query] or click[button], inside "
    "<action> </action> tags.")

# Letters/digits/hyphen on either side mean "inside a word": "t-shirt" must not yield "shirt" as
# a separate hit for a different table row, and "flip-flop" stays one keyword.
_PATTERNS = tuple(
    (cat, re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(k) for k in kws) + r")(?:s|es)?(?![\w-])"))
    for cat, kws in KEYWORDS)


def classify(task: str, hint: str | None = None) -> str:
    """WebShop category of a shopping goal (e.g. ``"i need a men's t-shirt ..."`` -> ``apparel``).

    ``hint`` is accepted for registry symmetry and ignored (WebShop sessions carry no category).
    Returns one of :data:`CATEGORIES`; ``"other"`` when no keyword matches. Never raises.
    """
    goal = (task or "").lower()
    for category, pattern in _PATTERNS:
        if pattern.search(goal):
            return category
    return "other"


_PRODUCT_ID = re.compile(r"[A-Z0-9]{10}", re.I)
#: What a click on each page button does (WebShop's text pages; ``PAGE_BUTTONS``).
_BUTTON_EFFECTS = {
    "buy now": "buys the product on this page with the options selected; the episode ends",
    "back to search": "returns to the search page",
    "< prev": "shows the previous page of results",
    "next >": "shows the next page of results",
    "description": "opens the product's description",
    "features": "opens the product's feature list",
    "reviews": "opens the product's reviews",
    "search": "opens the search box",
}


def action_effect(action: str) -> str:
    """What WebShop action ``action`` does, in a few words: a search, a page button
    (``PAGE_BUTTONS``), a product id (10 letters and digits) opened from the results, or else an
    option selected on the product page. A distill prompt names it, because the 1.5B teacher
    explained a ``click[Buy Now]`` as a new search. "" for text that is no WebShop action."""
    text = (action or "").strip()
    m = re.fullmatch(r"(search|click)\[(.*)\]", text, re.S | re.I)
    if not m:
        return ""
    verb, arg = m.group(1).lower(), m.group(2).strip()
    if verb == "search":
        return f'searches the shop for "{arg}"'
    if arg.lower() in _BUTTON_EFFECTS:
        return _BUTTON_EFFECTS[arg.lower()]
    if _PRODUCT_ID.fullmatch(arg):
        return f"opens product {arg} from the results"
    return f'selects the option "{arg}" on the product page'
