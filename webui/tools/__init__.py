"""Tools a model can call: built-ins, tool files in text-generation-webui's format, MCP servers' tools.

    toolbox = ToolBox.for_user_data(config.user_data_dir)
    listing = toolbox.list()            # ToolList: tools (ToolSpec) and problems (ToolProblem)
    result = toolbox.call("calculate", {"expression": "2 ** 10"})   # ToolResult: text, error, seconds, truncated
    toolbox.close()                     # stops MCP sessions and stdio servers
"""

from webui.tools.calculator import CalculatorError, evaluate
from webui.tools.mcp_client import McpClients, McpTool
from webui.tools.mcp_config import CONFIG_FILE_NAME, McpConfig, McpConfigError, McpServer, McpServerStore
from webui.tools.spec import ToolError, ToolProblem, ToolResult, ToolSpec
from webui.tools.toolbox import ToolBox, ToolList

__all__ = ["CONFIG_FILE_NAME", "CalculatorError", "McpClients", "McpConfig", "McpConfigError", "McpServer",
           "McpServerStore", "McpTool", "ToolBox", "ToolError", "ToolList", "ToolProblem", "ToolResult",
           "ToolSpec", "evaluate"]
