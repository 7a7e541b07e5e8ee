"""The write path: plan a change and build a segment (`build`), commit a generation (`commit`),
merge segments (`merge`); the memory writer and its log fold (`memory`); vectors from a file
(`vectors_import`). See each module for the stage it owns."""
