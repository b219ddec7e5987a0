"""One answer being written, kept as the levers read it, at a cost per token that does not grow.

``AnswerState`` is told each generated token (``append``) and keeps, beside the token ids and raw
bytes, what the levers ask of the answer: its text, where the claim a marker would cite begins,
where the sentence began, the last bracket of each kind, and the ends of the claims before. Each
is updated from the characters the token completed alone, never by decoding or scanning the
whole answer again, so a step of a 500-token answer costs what a step of a 16-token one does.
What a lever reads at a step (the claim, its words) is bounded by one sentence.

The text is what ``data.decode("utf-8", errors="replace")`` gives: a character cut between two
tokens shows as U+FFFD until its last byte arrives. The trackers read only complete characters
(``committed``); a cut character is never a bracket, terminator or white space, so what they
find holds for the text with its placeholder too.
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Sequence

from citeformer.decoding.vocab import WORD

__all__ = ["AnswerState", "group_start"]

_TERMINATORS = frozenset(".!?")
_CLAIM_BOUNDARY = re.compile(r"\]|[.!?](?=\s)")
"""``claim_of``'s boundaries: a claim starts after the last ``]``, or after the last terminator
that white space follows."""


class AnswerState:
    """One answer being written: its token ids, bytes and text, and where its claim begins.

    Appended once per generated token. ``text``, ``claim`` and ``claim_words`` are found once
    per step, on first read, from the part of the answer that can still change them.
    """

    __slots__ = (
        "_boundary_ends",
        "_boundary_needs",
        "_claim",
        "_claim_words",
        "_decoder",
        "_pending",
        "_text",
        "committed",
        "data",
        "first_solid",
        "last_close",
        "last_open",
        "sentence_start",
        "token_bytes",
        "tokens",
    )

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        self.token_bytes = token_bytes
        self.tokens: list[int] = []
        """The answer's token ids."""
        self.data = bytearray()
        """The answer's raw bytes."""
        self.committed = ""
        """The text of the answer's complete characters (``text`` less a cut one's placeholder)."""
        self.last_open = -1
        """Index in the text of the last ``[`` (-1: none)."""
        self.last_close = -1
        """Index in the text of the last ``]`` (-1: none)."""
        self.sentence_start = 0
        """Index in the text after the last cite-group's terminator (``][.!?]``): where the
        sentence being written began."""
        self.first_solid = -1
        """Index in the text of its first character that is not white space (-1: none yet)."""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._text: str | None = ""
        self._claim: str | None = None
        self._claim_words: int | None = None
        # Claim boundaries in text order: where each claim begins, and the length a head of the
        # text needs to hold it (a terminator counts only once white space follows it).
        self._boundary_ends: list[int] = []
        self._boundary_needs: list[int] = []

    def append(self, token_id: int) -> None:
        """Add one generated token."""
        raw = self.token_bytes[token_id]
        self.tokens.append(token_id)
        self.data += raw
        piece = self._decoder.decode(raw)
        cut = self._decoder.getstate()[0]
        self._pending = cut.decode("utf-8", errors="replace") if cut else ""
        if piece:
            self._read(piece)
        self._text = self._claim = self._claim_words = None

    def _read(self, piece: str) -> None:
        """Move every tracker past ``piece``, the characters this token completed."""
        start = len(self.committed)
        before = self.committed[-1:]
        self.committed += piece
        if self.first_solid < 0 and not piece.isspace():
            self.first_solid = start + len(piece) - len(piece.lstrip())
        opened, closed = piece.rfind("["), piece.rfind("]")
        if opened >= 0:
            self.last_open = start + opened
        if closed >= 0:
            self.last_close = start + closed
        # A boundary may straddle the token: its terminator last, its white space now (a
        # ``]`` read last was counted then).
        for match in _CLAIM_BOUNDARY.finditer(before + piece):
            if match.start() < len(before) and match.group() == "]":
                continue
            end = start - len(before) + match.end()
            self._boundary_ends.append(end)
            self._boundary_needs.append(end if match.group() == "]" else end + 1)
        if closed >= 0 or before == "]":
            window = before + piece
            for index in range(len(window) - 1):
                if window[index] == "]" and window[index + 1] in _TERMINATORS:
                    self.sentence_start = start - len(before) + index + 2

    @property
    def text(self) -> str:
        """The answer's text (a character cut between tokens shows as U+FFFD until complete)."""
        if self._text is None:
            self._text = self.committed + self._pending if self._pending else self.committed
        return self._text

    @property
    def claim(self) -> str:
        """The claim a marker opened now would cite (``claim_of`` the text)."""
        if self._claim is None:
            self._claim = self.claim_before(len(self.text))
        return self._claim

    @property
    def claim_words(self) -> int:
        """How many words the claim holds, as a reader counts them (``WORD``)."""
        if self._claim_words is None:
            self._claim_words = len(WORD.findall(self.claim))
        return self._claim_words

    def claim_before(self, end: int) -> str:
        """The claim a marker at index ``end`` of the text cites: ``claim_of(text[:end])``."""
        found = bisect.bisect_right(self._boundary_needs, end)
        start = self._boundary_ends[found - 1] if found else 0
        return self.text[start:end].strip()

    def ends_with(self, pattern: re.Pattern[str], window: int) -> re.Match[str] | None:
        """``pattern.search`` over the text's last ``window`` characters.

        For a pattern anchored at the end (``$``) whose matches never span more than ``window``
        characters: the same answer as a search of the whole text, found in constant time.
        """
        return pattern.search(self.text[-window:])

    def lstripped(self) -> str:
        """``text.lstrip()``, in the time of what it returns."""
        if self.first_solid >= 0:
            return self.text[self.first_solid:]
        return self._pending.lstrip()

    def last_solid(self) -> str:
        """The last character of the text that is not white space ("" for none)."""
        index = self.solid_before(len(self.text))
        return self.text[index] if index >= 0 else ""

    def solid_before(self, end: int) -> int:
        """Index of the text's last character before ``end`` that is not white space (-1: none).

        In the time of the white space stepped over.
        """
        text = self.text
        index = end - 1
        while index >= 0 and text[index].isspace():
            index -= 1
        return index


def group_start(text: str, opened: int) -> int:
    """Where the marker group whose last marker opens at ``opened`` may begin, or earlier.

    Walks back over the group's closed markers (``[1]``, ``[12] ``); a start from which a search
    for ``OPEN_GROUP`` or ``CLOSED_GROUP`` finds what a search of the whole text does (its
    character classes are wider than the patterns', never narrower).
    """
    start = opened
    while True:
        index = start
        while index > 0 and text[index - 1].isspace():
            index -= 1
        if index == 0 or text[index - 1] != "]":
            return start
        index -= 1
        while index > 0 and text[index - 1].isdigit():
            index -= 1
        if index == 0 or text[index - 1] != "[":
            return start
        start = index - 1
