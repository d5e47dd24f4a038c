"""Final-answer extraction from a model response, as the reference reward does (STARE_SPEC.md §4).

Pure string work, linear in the response length: safe on a 10^6-character output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKERS: tuple[str, ...] = (
    "<!-- Final Answer -->", "<!-- Summarize Answer -->",
    "最终答案", "**答案**", "Final Answer", "答案：", "**Answer**", "Answer:", "总结", "Conclusion",
)
"""Answer markers, tried in this order; the text after the last occurrence of the first found one is kept."""

_SOLUTION_TOKENS = re.compile(r"<\|(?:begin|end)_of_(?:solution|thought)\|>")
_BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_BOX_CHARS = 10_000
"""A boxed answer longer than this is not an answer; it also bounds the work on adversarial text."""
MAX_BOX_TRIES = 32
"""At most this many unclosed `\\boxed{` (e.g. a truncated response) are skipped from the end."""
TAIL_CHARS = 300
"""Without a box or marker, only the last this-many characters go to the verifier (reference)."""


@dataclass(frozen=True)
class Extraction:
    """What to verify: an explicit `prediction`, or only a `candidate` text for math-verify to search."""

    prediction: str | None
    """The explicit final answer (boxed content or text after a marker); None if there is none."""
    candidate: str | None
    """Text for math-verify: `\\boxed{prediction}`, or the response tail; None: nothing to grade."""

    @property
    def boxed(self) -> bool:
        """True when the prediction is the content of a box (not a marker line or a tail)."""
        return self.prediction is not None and self.candidate == "\\boxed{" + self.prediction + "}"


def answer_region(text: str) -> str:
    """The part of the response that holds the final answer.

    After the last `<answer>` (up to `</answer>`); else after the last `</thinking>` or `</think>`;
    else the whole text. Solution/thought delimiter tokens are removed.
    """
    if "<answer>" in text:
        text = text.rsplit("<answer>", 1)[1].split("</answer>", 1)[0]
    elif "</thinking>" in text:
        text = text.rsplit("</thinking>", 1)[1]
    elif "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return _SOLUTION_TOKENS.sub("", text)


def _matching_brace(text: str, start: int) -> int:
    """Index of the `}` closing the `{` at `start`, or -1 (unclosed, or longer than MAX_BOX_CHARS)."""
    depth = 0
    for i in range(start, min(len(text), start + MAX_BOX_CHARS)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def last_boxed(text: str) -> str | None:
    r"""Content of the last complete `\boxed{...}` (or `\fbox{...}`, `\boxed 5`), nested braces kept.

    Returns None when there is no complete box. An empty box gives "".
    """
    end = len(text)
    for _ in range(MAX_BOX_TRIES):
        at, command = max((text.rfind(c, 0, end), c) for c in _BOX_COMMANDS)
        if at < 0:
            return None
        rest = at + len(command)
        if text.startswith("{", rest):
            close = _matching_brace(text, rest)
            if close >= 0:
                return text[rest + 1:close]
        elif text.startswith(" ", rest):  # `\boxed 5`: up to whitespace or `$`
            match = re.match(r" +([^\s$]+)", text[rest:rest + MAX_BOX_CHARS])
            if match:
                return match.group(1)
        end = at
    return None


def _after_marker(region: str) -> str | None:
    for marker in MARKERS:
        if marker in region:
            return region.rsplit(marker, 1)[1]
    return None


def clean_prediction(answer: str) -> str:
    """Strip what surrounds a final answer: whitespace, `$`, `**`, colons, a trailing full stop."""
    while True:
        before = answer
        answer = answer.strip().strip("*:：$").strip()
        if answer.startswith("\\(") and answer.endswith("\\)"):
            answer = answer[2:-2]
        if answer.endswith(".") and not answer.endswith(".."):
            answer = answer[:-1]
        if answer == before:
            return answer


def extract_answer(text: str) -> Extraction:
    r"""Find the final answer of a response.

    Order (STARE_SPEC.md §4): the answer region; cut after an answer marker if one is present;
    the last `\boxed{}` in what is left; else the first non-empty line after the marker; else the
    last 300 characters of the last 10 paragraphs, for math-verify to search.
    """
    region = answer_region(text)
    after = _after_marker(region)
    scope = region if after is None else after
    boxed = last_boxed(scope)
    if boxed is not None:
        boxed = clean_prediction(boxed)
        return Extraction(boxed, "\\boxed{" + boxed + "}") if boxed else Extraction(None, None)
    if after is not None:
        line = next((ln for ln in after.strip("*:： \n").splitlines() if ln.strip()), "")
        line = clean_prediction(line[:MAX_BOX_CHARS])
        if line:
            return Extraction(line, line)
    tail = "\n\n".join(region.split("\n\n")[-10:])[-TAIL_CHARS:]
    return Extraction(None, tail) if tail.strip() else Extraction(None, None)
