"""The job filter typed after `/`: words that must match, `!word` for words that must not.

A job's search text (`search_text`) is made once per row and kept (tui.dash.jobindex): a
keystroke only tests the kept texts, it never builds 10,000 strings again."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobFilter:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "JobFilter":
        inc, exc = [], []
        for word in text.lower().split():
            if word.startswith("!") and len(word) > 1:
                exc.append(word[1:])
            elif word != "!":
                inc.append(word)
        return cls(tuple(inc), tuple(exc))

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def matches(self, job) -> bool:
        return self.matches_text(search_text(job))

    def matches_text(self, text: str) -> bool:
        """Whether a job with this search text is shown."""
        return all(w in text for w in self.include) and not any(w in text for w in self.exclude)

    def describe(self) -> str:
        return " ".join([*self.include, *(f"!{w}" for w in self.exclude)])


def search_text(job) -> str:
    """What the filter's words are looked for in: id, name, state and target, lower case."""
    return " ".join([job.short_id, job.name, job.state.value, job.provider or ""]).lower()
