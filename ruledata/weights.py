"""Rule weights: how strongly generation favours a rule. The formula lives here and only here.

    weight = severity × class_priority × confidence × performance × deployment × recency

each factor taken from the rule's metadata (ET Open's conventions) and its classtype:

| factor         | source                              | values                                        |
|----------------|-------------------------------------|-----------------------------------------------|
| severity       | metadata signature_severity         | Critical 4, Major 3, Minor 2, Informational 1; absent 2 |
| class_priority | classtype's priority, or `priority:` | 1 → 1.0, 2 → 0.7, 3 → 0.45, 4+ → 0.25; absent 0.45 |
| confidence     | metadata confidence                 | High 1.0, Medium 0.8, Low 0.5; absent 0.8     |
| performance    | metadata performance_impact         | Low 1.0, Moderate/Medium 0.75, Significant/High 0.4; absent 0.9 |
| deployment     | metadata deployment (best value)    | Perimeter/Internet 1.0, Internal 0.8, Datacenter 0.5, SSLDecrypt 0.2; absent 0.9 |
| recency        | metadata updated_at (or created_at) | 0.5 + 0.5 × 2^(−age / 2 years), age counted back from the newest rule in the ruleset; absent 0.5 |

Routers are perimeter devices with little CPU and no TLS interception, hence the deployment
and performance factors. Recency is measured against the ruleset itself, not the clock, so the
same archive always gives the same weights. Disabled and deleted rules keep their computed
weight for reference but are marked ineligible; generation samples only eligible rules.
Weights are rounded to 6 decimals so they are stable across platforms.
"""

from __future__ import annotations

import functools
import math
from datetime import date

SEVERITY = {"critical": 4.0, "major": 3.0, "minor": 2.0, "informational": 1.0}
SEVERITY_ABSENT = 2.0
CLASS_PRIORITY = {1: 1.0, 2: 0.7, 3: 0.45}
CLASS_PRIORITY_LOW = 0.25
CLASS_PRIORITY_ABSENT = 0.45
CONFIDENCE = {"high": 1.0, "medium": 0.8, "low": 0.5}
CONFIDENCE_ABSENT = 0.8
PERFORMANCE = {"low": 1.0, "moderate": 0.75, "medium": 0.75, "significant": 0.4, "high": 0.4}
PERFORMANCE_ABSENT = 0.9
DEPLOYMENT = {"perimeter": 1.0, "internet": 1.0, "internal": 0.8, "datacenter": 0.5,
              "ssldecrypt": 0.2}
DEPLOYMENT_ABSENT = 0.9
RECENCY_HALF_LIFE_DAYS = 730.0
RECENCY_ABSENT = 0.5


def parse_classification(text: str) -> dict[str, int]:
    """`config classification: name,description,priority` lines → {name: priority}."""
    priorities = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("config classification:"):
            continue
        parts = [part.strip() for part in line.split(":", 1)[1].split(",")]
        if len(parts) >= 3 and parts[-1].isdigit():
            priorities[parts[0]] = int(parts[-1])
    return priorities


@functools.lru_cache(maxsize=8192)
def _et_date(value: str) -> date | None:
    """ET writes dates as 2020_06_05."""
    try:
        year, month, day = (int(part) for part in value.split("_"))
        return date(year, month, day)
    except ValueError:
        return None


def metadata_date(rule: dict, key: str) -> date | None:
    for value in rule["metadata"].get(key, ()):
        parsed = _et_date(value)
        if parsed is not None:
            return parsed
    return None


def last_change(rule: dict) -> date | None:
    return metadata_date(rule, "updated_at") or metadata_date(rule, "created_at")


def _first(rule: dict, key: str, table: dict[str, float], absent: float) -> float:
    values = rule["metadata"].get(key)
    if not values:
        return absent
    return max((table.get(value.lower(), absent) for value in values), default=absent)


def class_priority(rule: dict, classification: dict[str, int]) -> int | None:
    if rule["priority"] is not None:
        return rule["priority"]
    return classification.get(rule["classtype"]) if rule["classtype"] else None


def weight_factors(rule: dict, priority: int | None, newest: date | None) -> dict[str, float]:
    """The factors of the weight, in the order they are multiplied (`priority`: the rule's
    class priority, see class_priority; `newest`: the ruleset's newest change date)."""
    if priority is None:
        priority_factor = CLASS_PRIORITY_ABSENT
    else:
        priority_factor = CLASS_PRIORITY.get(priority, CLASS_PRIORITY_LOW)
    changed = last_change(rule)
    if changed is None or newest is None:
        recency = RECENCY_ABSENT
    else:
        age_days = max((newest - changed).days, 0)
        recency = 0.5 + 0.5 * 2.0 ** (-age_days / RECENCY_HALF_LIFE_DAYS)
    return {"severity": _first(rule, "signature_severity", SEVERITY, SEVERITY_ABSENT),
            "class_priority": priority_factor,
            "confidence": _first(rule, "confidence", CONFIDENCE, CONFIDENCE_ABSENT),
            "performance": _first(rule, "performance_impact", PERFORMANCE, PERFORMANCE_ABSENT),
            "deployment": _first(rule, "deployment", DEPLOYMENT, DEPLOYMENT_ABSENT),
            "recency": recency}


def rule_weight(rule: dict, classification: dict[str, int], newest: date | None) -> float:
    factors = weight_factors(rule, class_priority(rule, classification), newest)
    return round(math.prod(factors.values()), 6)


def is_deleted(rule: dict) -> bool:
    """ET keeps retired rules, commented out, in emerging-deleted.rules."""
    return rule["file"].endswith("deleted.rules")


def annotate(rules: list[dict], classification: dict[str, int], newest: date | None) -> None:
    """Add `class_priority`, `weight`, `deleted` and `eligible` to every rule, in place.
    `newest` is the ruleset's newest change date (the recency reference)."""
    for rule in rules:
        rule["class_priority"] = class_priority(rule, classification)
        rule["weight"] = rule_weight(rule, classification, newest)
        rule["deleted"] = is_deleted(rule)
        rule["eligible"] = rule["enabled"] and not rule["deleted"] and rule["weight"] > 0
