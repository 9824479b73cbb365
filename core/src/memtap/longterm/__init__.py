"""Long-term memory: facts, the per-entity recall index and its scoring, time in recall,
memorize (background extraction and the remember tool) and the embedders."""
