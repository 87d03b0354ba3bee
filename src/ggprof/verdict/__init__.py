"""Verdicts: findings about a measured or reported speed, from the backend that ran it."""
