"""Memory benchmarks over conversations: LoCoMo (Maharana et al., ACL 2024) and LongMemEval (Wu et
al., ICLR 2025), read from their published files, each question ranked against its own conversation
or haystack, scored with the papers' metrics. See docs/evaluation.md#memory-benchmarks."""

from hybridlab.eval.conversations.records import Haystack, Question, Turn

__all__ = ["Haystack", "Question", "Turn"]
