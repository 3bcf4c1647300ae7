"""Schema migrations: script N (1-based) moves a database from user_version N-1 to N.

Append new scripts at the end; never edit one that has shipped.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: chats, their messages, and notebooks.
    """
    CREATE TABLE chats (
        id            INTEGER PRIMARY KEY,
        title         TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        created       REAL NOT NULL,
        updated       REAL NOT NULL
    );
    CREATE INDEX chats_by_updated ON chats (updated DESC, id DESC);

    CREATE TABLE messages (
        id       INTEGER PRIMARY KEY,
        chat_id  INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role     TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content  TEXT NOT NULL,
        stats    TEXT,  -- a JSON object, or NULL
        created  REAL NOT NULL,
        UNIQUE (chat_id, position)
    );

    CREATE TABLE notebooks (
        name    TEXT PRIMARY KEY,
        text    TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE INDEX notebooks_by_updated ON notebooks (updated DESC);
    """,
    # 2: batch prompt-testing runs and their results (one row per prompt x setting x sample).
    """
    CREATE TABLE batch_runs (
        id      INTEGER PRIMARY KEY,
        name    TEXT NOT NULL,
        spec    TEXT NOT NULL,  -- JSON: prompts, settings, samples, seeds, model, everything to re-run it
        model   TEXT,
        status  TEXT NOT NULL CHECK (status IN ('running', 'done', 'cancelled', 'failed')),
        total   INTEGER NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE INDEX batch_runs_by_created ON batch_runs (created DESC, id DESC);

    CREATE TABLE batch_results (
        id     INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES batch_runs (id) ON DELETE CASCADE,
        cell   INTEGER NOT NULL,  -- the cell's index in the run's plan
        result TEXT NOT NULL,     -- JSON of one result row
        UNIQUE (run_id, cell)
    );
    """,
    # 3: perplexity evaluations, kept to compare models, quantizations and adapters.
    """
    CREATE TABLE perplexity (
        id        INTEGER PRIMARY KEY,
        model     TEXT NOT NULL,
        loader    TEXT NOT NULL,
        loras     TEXT NOT NULL,  -- JSON list of [name, weight]
        dataset   TEXT NOT NULL,  -- a label: the file name, or the start of pasted text
        tokens    INTEGER NOT NULL,
        nll       REAL NOT NULL,  -- mean negative log-likelihood per token
        ppl       REAL NOT NULL,
        window    INTEGER NOT NULL,
        created   REAL NOT NULL
    );
    """,
    # 4: messages form a tree (regenerated replies and edited messages are kept as versions, each with its own
    # continuation); a chat shows the path that ends at its current leaf.
    """
    CREATE TABLE message_tree (
        id        INTEGER PRIMARY KEY,
        chat_id   INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES message_tree (id) ON DELETE CASCADE,  -- NULL: a first message
        position  INTEGER NOT NULL,  -- depth in the tree: 0 for a first message
        role      TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content   TEXT NOT NULL,
        stats     TEXT,  -- a JSON object, or NULL
        created   REAL NOT NULL
    );
    INSERT INTO message_tree (id, chat_id, parent_id, position, role, content, stats, created)
        SELECT m.id, m.chat_id,
               (SELECT p.id FROM messages AS p WHERE p.chat_id = m.chat_id AND p.position = m.position - 1),
               m.position, m.role, m.content, m.stats, m.created
        FROM messages AS m ORDER BY m.position, m.id;
    DROP TABLE messages;
    ALTER TABLE message_tree RENAME TO messages;
    CREATE INDEX messages_by_parent ON messages (chat_id, parent_id);
    ALTER TABLE chats ADD COLUMN current_leaf INTEGER;
    UPDATE chats SET current_leaf =
        (SELECT id FROM messages WHERE chat_id = chats.id ORDER BY position DESC, id DESC LIMIT 1);
    """,
    # 5: the response cache: a batch cell's whole request (model, loader, adapters, prompt, every parameter and the
    # seed) -> what it produced, so running the same cell again takes it from here.
    """
    CREATE TABLE response_cache (
        key      TEXT PRIMARY KEY,  -- sha256 of the request, as JSON
        response TEXT NOT NULL,     -- JSON: output, finish_reason, token counts, timing
        created  REAL NOT NULL
    );
    """,
    # 6: owners. With a UI login every chat, notebook, batch run and perplexity result belongs to the user who made
    # it ('' without a login: the shared workspace, where everything made before stays). Notebook names are unique
    # per owner. (Cached responses are kept per owner by their key: see webui/batch/run/cache.py.)
    """
    ALTER TABLE chats ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    CREATE INDEX chats_by_owner ON chats (owner, updated DESC, id DESC);
    ALTER TABLE batch_runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE perplexity ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    CREATE TABLE notebooks_owned (
        owner   TEXT NOT NULL DEFAULT '',
        name    TEXT NOT NULL,
        text    TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        PRIMARY KEY (owner, name)
    );
    INSERT INTO notebooks_owned (owner, name, text, created, updated)
        SELECT '', name, text, created, updated FROM notebooks;
    DROP TABLE notebooks;
    ALTER TABLE notebooks_owned RENAME TO notebooks;
    CREATE INDEX notebooks_by_updated ON notebooks (owner, updated DESC);
    """,
    # 7: API requests as they came and went (#33): kept with --capture-requests, or when a chat completion asks
    # `store: true` (OpenAI's stored chat completions). ``client`` names the API key that sent it (a label, never
    # the key); ``seq`` keeps the order they were taken in, oldest dropped first past the retention budget.
    """
    CREATE TABLE api_requests (
        seq      INTEGER PRIMARY KEY,
        id       TEXT NOT NULL UNIQUE,   -- a completion's own id (chatcmpl-...), else req-...
        created  REAL NOT NULL,
        endpoint TEXT NOT NULL,          -- the path, e.g. /v1/chat/completions
        status   INTEGER NOT NULL,
        client   TEXT NOT NULL,
        model    TEXT,                   -- the model that answered (NULL: none did)
        stored   INTEGER NOT NULL DEFAULT 0,  -- asked store: true (listed by the stored completions routes)
        metadata TEXT NOT NULL DEFAULT '{}',  -- JSON: the request's metadata, updatable
        request  TEXT NOT NULL,          -- the body as sent (JSON text when it was JSON)
        response TEXT,                   -- JSON: the completion (a stream's put together) or the error body
        details  TEXT NOT NULL DEFAULT '{}',  -- JSON: the prompt as rendered, parameters as resolved, timings
        bytes    INTEGER NOT NULL        -- request + response + details, for the retention budget
    );
    CREATE INDEX api_requests_by_client ON api_requests (client, stored, seq);
    """,
    # 8: a chat's mode (instruct, chat, chat-instruct: webui/chat/modes.py) and its character (a name in
    # <user data>/characters; NULL: none). Chats made before are instruct chats without a character.
    """
    ALTER TABLE chats ADD COLUMN mode TEXT NOT NULL DEFAULT 'instruct';
    ALTER TABLE chats ADD COLUMN character TEXT;
    """,
    # 9: images in messages (#35), each stored once by its content: a message names its images in order.
    """
    CREATE TABLE images (
        digest  TEXT PRIMARY KEY,  -- SHA-256 of the bytes, hex
        data    BLOB NOT NULL,     -- the image as it was attached (PNG, JPEG, ...)
        created REAL NOT NULL
    );
    CREATE TABLE message_images (
        message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        position   INTEGER NOT NULL,
        digest     TEXT NOT NULL REFERENCES images (digest),
        PRIMARY KEY (message_id, position)
    );
    CREATE INDEX message_images_by_digest ON message_images (digest);
    """,
    # 10: batch runs are numbered per owner (#43): a user's first run is #1 whoever else runs batches, so a run's
    # number tells nobody what others did. Runs made before are numbered in the order they were made.
    """
    ALTER TABLE batch_runs ADD COLUMN number INTEGER NOT NULL DEFAULT 0;
    UPDATE batch_runs SET number = (SELECT count(*) FROM batch_runs AS earlier
                                    WHERE earlier.owner = batch_runs.owner AND earlier.id <= batch_runs.id);
    CREATE INDEX batch_runs_by_owner_number ON batch_runs (owner, number);
    """,
    # 11: the tools a chat offers its model (#44), by name (webui/tools): a JSON list, [] for none. What each
    # reply called, with the results, is kept in the reply's stats (``tool_steps``).
    """
    ALTER TABLE chats ADD COLUMN tools TEXT NOT NULL DEFAULT '[]';
    """,
    # 12: documents attached to messages (#44), each stored once by its content, as images are: its bytes, how it
    # was read and its text (what the model reads); a message names its documents in order, each by the name it
    # was attached with.
    """
    CREATE TABLE documents (
        digest  TEXT PRIMARY KEY,  -- SHA-256 of the bytes, hex
        data    BLOB NOT NULL,     -- the file as it was attached
        kind    TEXT NOT NULL,     -- how it was read: text, pdf or docx (webui/documents.py)
        text    TEXT NOT NULL,     -- what the model reads
        created REAL NOT NULL
    );
    CREATE TABLE message_documents (
        message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        position   INTEGER NOT NULL,
        digest     TEXT NOT NULL REFERENCES documents (digest),
        name       TEXT NOT NULL,
        PRIMARY KEY (message_id, position)
    );
    CREATE INDEX message_documents_by_digest ON message_documents (digest);
    """,
    # 13: OpenAI's Files and Batch APIs (#45). A file's metadata is a row here and its bytes a file in
    # <user data>/api_files named by its id (webui/store/api_files.py); ``client`` is the label of the API key that
    # owns it ('' without keys). A batch keeps its input's rows, each with its result once it has run (the line
    # of the output or error file), so a restarted server goes on from the rows not done (webui/store/api_batches.py).
    """
    CREATE TABLE api_files (
        seq        INTEGER PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,  -- file-...
        client     TEXT NOT NULL,
        filename   TEXT NOT NULL,
        purpose    TEXT NOT NULL,         -- batch (uploaded) or batch_output (a batch's output and error files)
        bytes      INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER                -- NULL: kept until deleted
    );
    CREATE INDEX api_files_by_client ON api_files (client, seq);

    CREATE TABLE api_batches (
        seq               INTEGER PRIMARY KEY,
        id                TEXT NOT NULL UNIQUE,  -- batch_...
        client            TEXT NOT NULL,
        endpoint          TEXT NOT NULL,
        input_file_id     TEXT NOT NULL,
        completion_window TEXT NOT NULL,
        status            TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing',
                                                          'completed', 'expired', 'cancelling', 'cancelled')),
        model             TEXT,                   -- the first row's body's model
        metadata          TEXT,                   -- JSON object, or NULL
        output_expires_after INTEGER,             -- seconds the output and error files are kept; NULL: until deleted
        errors            TEXT,                   -- JSON list of {code, message, param, line}, or NULL
        output_file_id    TEXT,
        error_file_id     TEXT,
        total             INTEGER NOT NULL DEFAULT 0,
        completed         INTEGER NOT NULL DEFAULT 0,
        failed            INTEGER NOT NULL DEFAULT 0,
        input_tokens      INTEGER NOT NULL DEFAULT 0,
        cached_tokens     INTEGER NOT NULL DEFAULT 0,
        output_tokens     INTEGER NOT NULL DEFAULT 0,
        created_at        INTEGER NOT NULL,
        expires_at        INTEGER NOT NULL,
        times             TEXT NOT NULL DEFAULT '{}'  -- JSON: when it reached each status, {"in_progress": 1700000000}
    );
    CREATE INDEX api_batches_by_client ON api_batches (client, seq);
    CREATE INDEX api_batches_by_status ON api_batches (status, seq);

    CREATE TABLE api_batch_rows (
        batch_seq   INTEGER NOT NULL REFERENCES api_batches (seq) ON DELETE CASCADE,
        line        INTEGER NOT NULL,  -- 1-based, in the input file
        custom_id   TEXT NOT NULL,
        url         TEXT NOT NULL,
        body        TEXT NOT NULL,     -- JSON, as the row's request sends it
        status_code INTEGER,           -- its answer's; NULL: not run yet
        result      TEXT,              -- JSON: its line of the output file (status < 400) or the error file
        PRIMARY KEY (batch_seq, line)
    );
    CREATE INDEX api_batch_rows_pending ON api_batch_rows (batch_seq, status_code, line);
    """,
    # 14: OpenAI's Responses API (webui/api/responses.py): each response stored (store: true, the default) with the
    # input items it was given, so it can be retrieved, continued (previous_response_id) and listed; ``client``
    # names the API key that made it (a label, never the key), which alone sees it. A background response is
    # written when it is taken and again when it ends.
    """
    CREATE TABLE responses (
        seq        INTEGER PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,     -- resp_...
        client     TEXT NOT NULL,
        created    REAL NOT NULL,
        status     TEXT NOT NULL,            -- queued, in_progress, completed, incomplete, failed, cancelled
        background INTEGER NOT NULL DEFAULT 0,
        previous   TEXT,                     -- previous_response_id (NULL: none)
        response   TEXT NOT NULL,            -- JSON: the response object as last answered
        input      TEXT NOT NULL             -- JSON: the request's input items, each with its id
    );
    CREATE INDEX responses_by_client ON responses (client, seq);
    """,
    # 15: Anthropic's Message Batches API (webui/api/message_batches.py) on the same batches and rows: ``api`` names
    # the API a batch was made through, whose shapes it is answered in and whose list it is in ('openai': /v1/batches,
    # the batches made before; 'anthropic': /v1/messages/batches, whose requests come inline, so its input_file_id
    # is ''). An Anthropic batch's results are its rows' results, read from here (it writes no files).
    """
    ALTER TABLE api_batches ADD COLUMN api TEXT NOT NULL DEFAULT 'openai' CHECK (api IN ('openai', 'anthropic'));
    CREATE INDEX api_batches_by_api ON api_batches (api, client, seq);
    """,
)
