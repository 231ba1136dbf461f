"""Where the alert rules file is: shipped in the package, loaded by both stacks."""

from __future__ import annotations

from pathlib import Path

RULES = Path(__file__).with_name("alerts.yml")
