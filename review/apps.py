"""The review queue across tiers: held episodic entries, facts and learned procedures (docs/review.md)."""

from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "review"
    verbose_name = "Review queue"
