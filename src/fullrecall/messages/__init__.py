"""The message model and the shapes it converts to and from."""

from .formats import SHAPES, detect_shape, parse_message, parse_messages, render_message, render_messages
from .model import Block, Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "SHAPES", "Block", "Message", "OpaqueBlock", "TextBlock", "ToolResultBlock", "ToolUseBlock",
    "detect_shape", "parse_message", "parse_messages", "render_message", "render_messages",
]
