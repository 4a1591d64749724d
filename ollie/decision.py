"""One measured choice: does a challenger replace its baseline?

Every choice Ollie measures has this shape: a region's derived program against its ATen
calls, a rewritten graph's compile against the original's, a graph run eagerly against its
compile, a compile with frozen weights against the unfrozen one. One rule decides it: the
challenger runs where the median of the per-round ratios of interleaved timings
(``measure.compare``), the baseline's time over the challenger's, exceeds ``1 / margin``.
The margin is ``ADOPTION_MARGIN`` for a program of Ollie's; between two of torch's own
programs it need only clear the comparison's noise (``noise_margin``). Time a side spends
outside the timing (Dynamo's frame, where the challenger would run without it) is charged
to it.

A ``Decision`` holds the outcome and the figures behind it; the disk cache stores it as an
entry (``entry``, read back by ``stored``), ``explain`` prints its ``text``, and
``ollie tune`` measures again those within noise (``ollie.cache_entry.within_noise``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace

ADOPTION_MARGIN = 0.95   # a challenger of Ollie's must run in under 95 % of its baseline's time
NOISE_FLOOR = 0.02       # ratios this close to the threshold are noise even with no spread


class Outcome(enum.Enum):
    """What was decided. The value is what the disk cache stores."""
    ADOPTED = "adopted"          # the challenger runs
    NOT_FASTER = "not-faster"    # measured, not clearly faster: the baseline runs
    NOT_CHEAPER = "not-cheaper"  # no derived form promised a gain: nothing was measured
    GLUE_ONLY = "glue-only"      # the derived forms run the original's contractions
    KEPT = "kept"                # the baseline runs for a reason of its own (not stored)
    MEASURED = "measured"        # not a choice: a timing kept for later choices


TEXT = {
    Outcome.ADOPTED: "adopted",
    Outcome.NOT_FASTER: "kept: the derived program measured not clearly faster than the "
                        "original",
    Outcome.NOT_CHEAPER: "kept: no derived form is cheaper than the captured one",
    Outcome.GLUE_ONLY: "kept: its contractions are the original's (same operators, work and "
                       f"layouts, but for ones doing under {1 - ADOPTION_MARGIN:.0%} of the "
                       "work); Inductor fuses the work around them in either form",
    Outcome.MEASURED: "measured",
}
# what a later run may reuse; a region kept for a reason of its own is derived again
STORED = (Outcome.ADOPTED, Outcome.NOT_FASTER, Outcome.NOT_CHEAPER, Outcome.GLUE_ONLY,
          Outcome.MEASURED)


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    baseline_s: float | None = None    # median seconds a call of the baseline took
    challenger_s: float | None = None  # ... of the challenger
    speedup: float | None = None       # the ratio decided on (baseline over challenger)
    spread: float | None = None        # its noise: relative half inter-quartile range
    margin: float = ADOPTION_MARGIN
    reason: str = ""                   # why it was KEPT
    stored: bool = False               # read from the disk cache, not measured now

    @property
    def adopted(self) -> bool:
        return self.outcome is Outcome.ADOPTED

    @property
    def ratio(self) -> float:
        """The baseline's time over the challenger's, as decided on (the medians' ratio where
        no per-round figure was kept)."""
        return self.speedup or self.baseline_s / self.challenger_s

    @property
    def text(self) -> str:
        """The decision in words, for ``explain``."""
        return f"kept: {self.reason}" if self.outcome is Outcome.KEPT else TEXT[self.outcome]

    def entry(self) -> dict:
        """The disk cache's fields for this decision (``ollie.cache_entry.FIELDS``)."""
        return {"decision": self.outcome.value, "margin": self.margin, "remeasured": 0,
                "eager_s": self.baseline_s, "ollie_s": self.challenger_s,
                "speedup": self.speedup, "spread": self.spread}

    def overruled(self, outcome: Outcome, reason: str = "") -> Decision:
        """This decision's figures, with the outcome a later stage gave (the whole graph's
        check or comparison set the challenger aside)."""
        return replace(self, outcome=outcome, reason=reason)


def decide(timing, margin: float = ADOPTION_MARGIN, charge_s: float = 0.0,
           challenger_charge_s: float = 0.0) -> Decision:
    """The decision a ``measure.Comparison`` gives (the baseline timed as its ``eager``
    side, the challenger as its ``ollie`` side): adopted where the challenger leads by
    ``margin``. ``charge_s`` and ``challenger_charge_s``: seconds a call that each side
    spends outside the timing (Dynamo's frame, module calls), added to its median; the
    ratio decided on is scaled by how much they lengthen each side."""
    baseline_s = timing.eager_median + charge_s
    challenger_s = timing.ollie_median + challenger_charge_s
    speedup = timing.speedup
    if charge_s or challenger_charge_s:
        speedup *= baseline_s / timing.eager_median * timing.ollie_median / challenger_s
    return Decision(Outcome.ADOPTED if speedup * margin > 1 else Outcome.NOT_FASTER,
                    baseline_s, challenger_s, speedup, timing.spread, margin)


def noise_margin(spread: float) -> float:
    """The margin between two of torch's own programs: a lead beyond the comparison's noise
    (twice its spread, and at least ``NOISE_FLOOR``), and never more than ``ADOPTION_MARGIN``
    asks. A clear lead of 3 % counts; a graph whose time moves a few percent between runs (a
    BERT stack's 9 ms) needs its 5 %."""
    return 1 - min(1 - ADOPTION_MARGIN, max(NOISE_FLOOR, 2 * spread))


def stored(entry: dict | None) -> Decision | None:
    """The decision a cache entry holds (None: none, or one this version does not know)."""
    if not entry:
        return None
    try:
        outcome = Outcome(entry.get("decision"))
    except ValueError:
        return None
    return Decision(outcome, entry.get("eager_s"), entry.get("ollie_s"), entry.get("speedup"),
                    entry.get("spread"), entry.get("margin") or ADOPTION_MARGIN, stored=True)
