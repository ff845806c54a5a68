"""Evaluators: protocols that score trained models and their explanations."""
