"""The generation engine: one scheduler, our sampling, streaming events."""

from webui.engine.engine import Engine, EngineConfig, EngineStats, QueueFull
from webui.engine.params import InvalidParameter, SamplingParams
from webui.engine.stream import Interleaved, RequestStream
from webui.engine.types import (BACKGROUND, INTERACTIVE, CancelToken, EngineClosed, EngineError, GenerationError, GenerationEvent,
                                GenerationRequest, GenerationResult, NoModelLoaded, PromptTooLong, TokenLogprob)

__all__ = ["Engine", "EngineConfig", "EngineStats", "QueueFull", "InvalidParameter", "SamplingParams",
           "RequestStream", "Interleaved", "CancelToken", "EngineClosed", "EngineError", "GenerationError",
           "GenerationEvent", "GenerationRequest", "GenerationResult", "NoModelLoaded", "PromptTooLong", "TokenLogprob",
           "BACKGROUND", "INTERACTIVE"]
