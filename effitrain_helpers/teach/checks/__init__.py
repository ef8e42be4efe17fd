"""The exercises of each lesson: ``from effitrain_helpers.teach.checks.lesson_1_1 import q1, q2, q3, q4``."""
