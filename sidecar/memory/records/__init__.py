"""What a memory is: records, scopes and hits, turns and facts, category rows, vector
math, batches. The bottom layer: imports nothing else of the memory layer."""
