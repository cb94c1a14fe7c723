"""What a memory is: records, scopes, turns and facts, category rows, and the text
normalisation every lexical signal shares. Imports nothing else of the sidecar."""
