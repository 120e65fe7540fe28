"""The failure table moved to ``controller.model.failures`` (gflowd, ``gflowctl triage`` and the MCP
``triage`` tool share it); these names stay for code that imported them from here."""

from controller.model.failures import PATTERNS, Match, Pattern, fix_for
from controller.model.failures import match_lines as classify

__all__ = ["PATTERNS", "Match", "Pattern", "classify", "fix_for"]
