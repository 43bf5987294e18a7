"""Leakage control: a think may not score by repeating the answer.

A rationale that spells out its label makes any reader predict the label, whether or not it
explains anything (Hase et al., "Leakage-Adjusted Simulatability", arXiv 2010.04119). Before a
think is scored, every place where it repeats the expert action or one of the action's
arguments is replaced by :data:`MASK`:

* the whole command (``put spraybottle 2 in/on toilet 1``, ``click[Buy Now]``);
* each argument as the game names it: ALFWorld's numbered names (``spraybottle 2``, ``toilet 1``;
  a think that says "the spraybottle" keeps the word, one that says "spraybottle 2" cites the
  command), WebShop's button or query text (``Buy Now``, ``B09QQLDJ93``, ``natural``), the object
  of a TextWorld command (``coin``, ``north``), a search query.

What is left is the reasoning: the goal, what was seen, why this kind of action now.
"""
from __future__ import annotations

import re

#: What a masked span becomes: a neutral gap that names no object and no button.
MASK = "…"
_BRACKET = re.compile(r"^\s*(\w+)\s*\[(.*)\]\s*$", re.S)
_TAGGED = re.compile(r"<(search|answer)>(.*?)</\1>", re.S | re.I)


def action_arguments(action: str, env: str) -> list[str]:
    """The argument strings of ``action`` in ``env``, longest first (so a longer span is masked
    before a shorter one inside it). Empty for a bare command (``look``, ``done``)."""
    text = (action or "").strip()
    args: list[str] = []
    if (m := _BRACKET.match(text)) is not None:        # WebShop click[...] / search[...]
        args = [m.group(2).strip()]
    elif (tags := _TAGGED.findall(text)):              # search QA
        args = [body.strip() for _, body in tags]
    elif env == "alfworld":
        from pipeline.verify.alfworld_text import parse_command
        cmd = parse_command(text)
        args = list(cmd.args) if cmd is not None else []
    else:                                               # TextWorld and the rest: words after the verb
        words = text.split(maxsplit=1)
        args = [words[1]] if len(words) == 2 else []
        if len(words) == 2 and " " in words[1]:
            args += [w for w in re.split(r"\s+(?:to|in|on|from|with)\s+", words[1]) if w]
    return sorted({a for a in args if a}, key=len, reverse=True)


def _span(text: str) -> re.Pattern:
    """``text`` as a case-insensitive pattern that does not start or end inside a word."""
    body = r"\s+".join(re.escape(w) for w in text.split())
    left = r"(?<!\w)" if text[:1].isalnum() else ""
    right = r"(?!\w)" if text[-1:].isalnum() else ""
    return re.compile(left + body + right, re.I)


def mask_think(think: str, action: str, env: str) -> str:
    """``think`` with the expert ``action`` and its arguments (:func:`action_arguments`) replaced
    by :data:`MASK`, case-insensitively and on word bounds; runs of masks collapse into one."""
    out = think or ""
    for span in [action.strip(), *action_arguments(action, env)]:
        if span:
            out = _span(span).sub(MASK, out)
    return re.sub(rf"{MASK}(?:\s*{MASK})+", MASK, out)
