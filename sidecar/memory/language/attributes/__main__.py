"""Print ``docs/attributes.md``: ``python -m sidecar.memory.language.attributes``."""

from __future__ import annotations

from sidecar.memory.language.attributes import table

HEAD = """# Attributes

What the write path reads as an attribute of the user (or of someone or something of
the user's), from the declarations in `sidecar/memory/language/attributes/`. A newer
value of a single attribute supersedes the older one; an accumulating one adds to it.
`attribute` is the generic "User's <thing> is <value>" for the things it names
(surname, GP, landlord, employer, university ...). Generated:
`.venv/bin/python -m sidecar.memory.language.attributes > docs/attributes.md`.
"""

print(HEAD)
print(table(), end="")
