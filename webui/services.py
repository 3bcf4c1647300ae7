"""The services the UI, the API and the batch CLI share: the one place the object graph is built (Services.create)."""

from __future__ import annotations

from dataclasses import dataclass

from loaders.registry import LoaderRegistry
from webui.batch.run.cache import ResponseCache
from webui.batch.run.runner import BatchRunner
from webui.store.batch_runs import BatchStore
from webui.chat.characters import CharacterStore
from webui.chat.templates import TemplateStore
from webui.config import AppConfig
from webui.jobs import JobRunner
from webui.engine import Engine, EngineConfig
from loaders.base import LoadedModel
from webui.models import ModelManager, Slot
from webui.owner import current as current_owner
from webui.presets import PresetStore
from webui.settings import SettingsStore
from webui.store import ChatStore, Database, NotebookStore
from webui.store.api_batches import APIBatchStore
from webui.store.api_files import FileStore
from webui.store.responses import ResponseStore
from webui.store.perplexity import PerplexityStore
from webui.store.requests import RequestStore, Retention
from webui.tools import ToolBox
from webui.training.runner import TrainingRunner


@dataclass
class Services:
    config: AppConfig
    registry: LoaderRegistry
    models: ModelManager
    presets: PresetStore
    templates: TemplateStore
    settings: SettingsStore
    db: Database
    chats: ChatStore
    notebooks: NotebookStore
    batches: BatchStore
    batch_runner: BatchRunner
    perplexity: PerplexityStore
    jobs: JobRunner
    requests: RequestStore
    characters: CharacterStore
    training: TrainingRunner
    tools: ToolBox
    """The tools chats may offer (built-ins, ``<user data>/tools/``, the MCP servers of ``mcp_servers.json``)."""
    api_files: FileStore
    """The API's files (/v1/files): batch inputs, outputs and errors."""
    api_batches: APIBatchStore
    """The API's batches (/v1/batches), with their rows and results."""
    responses: ResponseStore
    """The Responses API's stored responses (/v1/responses), with their input items."""

    # -- the edge: who is calling is read here, once per use, and passed down to the ModelManager --------------
    @property
    def owner(self) -> str:
        """Who is calling (``webui.owner.current``): the UI's logged-in user, a batch run's starter, else ""."""
        return current_owner()

    def in_use(self) -> Slot | None:
        """The loaded model the caller uses (None: none is loaded)."""
        return self.models.in_use(self.owner)

    @property
    def loaded(self) -> LoadedModel | None:
        """The model the caller uses."""
        slot = self.in_use()
        return slot.model if slot else None

    @property
    def engine(self) -> Engine:
        """The engine of the model the caller uses (each loaded model has its own: ``models.slot(name).engine``;
        with none loaded, the engine that says so)."""
        return self.models.engine_for(self.owner)

    @property
    def active_loras(self) -> tuple[tuple[str, float], ...]:
        """The adapters attached to the caller's model, applied to requests that name none."""
        return self.models.loras_of(None, self.owner)

    def health(self) -> dict:
        """/health: the current model, every loaded one, and what their engines are doing together."""
        stats = [slot.engine.stats() for slot in self.models.slots()] or [self.models.primary.stats()]
        current = self.in_use()
        return {"status": "ok", "model": current.name if current else None, "models": self.models.names(),
                "running": sum(s.running for s in stats), "waiting": sum(s.waiting for s in stats),
                "tokens_per_second": round(sum(s.tokens_per_second for s in stats), 2)}

    @classmethod
    def create(cls, config: AppConfig, registry: LoaderRegistry | None = None) -> "Services":
        """Everything the app needs, over ``config``'s user data dir (which must exist)."""
        from loaders.registry import default_registry

        registry = registry or default_registry()
        engine = Engine(config=EngineConfig(max_running=config.max_running, max_waiting=config.max_waiting,
                                            prefix_cache_mb=config.prefix_cache_mb))
        db = Database(config.db_path)
        batches = BatchStore(db)
        batches.mark_interrupted()  # runs a previous process left 'running' died with it; their rows stay
        settings = SettingsStore(config.user_data_dir / "settings.json")
        models = ModelManager(config, engine, registry, settings)
        presets, templates = PresetStore(config.presets_dir), TemplateStore(config.templates_dir)
        runner = BatchRunner(models, presets, templates, batches, ResponseCache(db))
        api_files = FileStore(db, config.api_files_dir)
        responses = ResponseStore(db)
        responses.mark_interrupted()  # stored responses a previous process was generating died with it
        return cls(config, registry, models, presets, templates, settings, db, ChatStore(db), NotebookStore(db),
                   batches, runner, PerplexityStore(db), JobRunner(),
                   RequestStore(db, Retention(config.capture_max_requests, int(config.capture_max_mb * 2**20)),
                                capture_all=config.capture_requests),
                   characters=CharacterStore(config.characters_dir), training=TrainingRunner(models),
                   tools=ToolBox.for_user_data(config.user_data_dir), api_files=api_files,
                   api_batches=APIBatchStore(db, api_files), responses=responses)

    def close(self) -> None:
        """Unload the model, stop the engine, close the database; a second call does nothing."""
        engine = self.models.primary
        if engine.closed:
            return
        self.jobs.stop()
        self.training.close()  # a run stops at its step's end and keeps a checkpoint
        self.tools.close()  # MCP sessions end, stdio servers stop
        self.models.close()
        engine.close()
        self.db.close()
