"""``fullrecall keys``: create, list and revoke the service's API keys.

The commands themselves are :class:`fullrecall.service.cli.Keys`.
"""

from .cli import Keys

add_arguments = Keys.add_arguments
run = Keys.run
