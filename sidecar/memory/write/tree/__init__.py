"""The category tree: the taxonomy of topics, the clustering and the plan that file
memories under categories, and the builder that writes it."""
