"""Each tab's behaviour as a plain class over Services: plain values in and out, no Gradio.

The UI's tab modules lay out components and wire their events to these methods;
a mistake the user can fix is raised as UserError, which the UI shows as a
message while every panel keeps its content.
"""

from webui.controllers.errors import UserError

__all__ = ["UserError"]
