"""The job filter typed after `/`: words that must match, `!word` for words that must not."""

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
        fields = " ".join([job.short_id, job.name, job.state.value, job.provider or ""]).lower()
        return all(w in fields for w in self.include) and not any(w in fields for w in self.exclude)

    def describe(self) -> str:
        return " ".join([*self.include, *(f"!{w}" for w in self.exclude)])
