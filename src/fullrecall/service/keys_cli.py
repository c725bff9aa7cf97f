"""``fullrecall keys``: create, list and revoke API keys of the service (see :mod:`.cli`)."""

from .cli import Keys

add_arguments = Keys.add_arguments
run = Keys.run
