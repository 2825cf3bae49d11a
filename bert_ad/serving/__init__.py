"""Serving: exports (SavedModel, frozen graph) of any task, and scoring with them."""
