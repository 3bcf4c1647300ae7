"""The documents of a chat request's ``file`` parts, read as text into their messages.

OpenAI's part: ``{"type": "file", "file": {"file_data": "data:application/pdf;base64,...", "filename": "x.pdf"}}``
(``file_data`` may also be bare base64; without a filename, a data URL's media type names the kind). Each file is
read by webui/documents.py (text, PDF, .docx) and each run of file parts in a message becomes one text part there,
in order with the message's other parts: text-generation-webui's ``ATTACHMENTS:`` section. ``file_id`` (OpenAI's
Files API, which this server does not have) is refused. Each problem is a 400 naming the part
(``messages[0].content[1].file``); a prompt that does not fit the context with its documents is the usual
context_length_exceeded error, with each document's token count added.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from typing import TYPE_CHECKING

from loaders.base import LoadedModel
from webui.api.errors import APIError
from webui.api.protocol import ChatMessage, ContentPart, FileContent
from webui.documents import Document, DocumentError, DocumentLimits, attachments_text, read_document

if TYPE_CHECKING:
    from webui.api.serving import APIConfig

# A file part without a filename, sent as a data URL of one of these types, is read as this name.
_NAME_OF_TYPE = {"application/pdf": "document.pdf",
                 "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "document.docx"}
_SPACE = re.compile(rb"\s+")

PartIndex = tuple[int, int]  # (message, part)


def part_field(index: PartIndex) -> str:
    return f"messages[{index[0]}].content[{index[1]}].file"


def file_parts(messages: list[ChatMessage]) -> list[tuple[PartIndex, FileContent]]:
    """Every file part of a chat in order, with its (message, part) index."""
    return [((i, j), part.file) for i, m in enumerate(messages) if isinstance(m.content, list)
            for j, part in enumerate(m.content) if part.type == "file" and part.file is not None]


def read_files(messages: list[ChatMessage], config: APIConfig) -> dict[PartIndex, Document]:
    """The document of each file part of ``messages``, by (message, part) index; a 400 naming the part for each
    problem."""
    limits = DocumentLimits(max_bytes=config.max_document_bytes or 2**62)
    return {index: _read(part_field(index), part, limits) for index, part in file_parts(messages)}


async def request_documents(messages: list[ChatMessage], config: APIConfig) -> dict[PartIndex, Document]:
    """read_files, off the event loop (a PDF may take seconds)."""
    if not file_parts(messages):
        return {}
    return await asyncio.to_thread(read_files, messages, config)


def documents_as_text(messages: list[ChatMessage], documents: dict[PartIndex, Document]) -> list[ChatMessage]:
    """``messages`` with each run of file parts in a message written as one text part where it stands: the
    ATTACHMENTS section of their documents, after a blank line when something comes before it."""
    if not documents:
        return messages
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message.content, list) or all(part.type != "file" for part in message.content):
            out.append(message)
            continue
        parts: list[ContentPart] = []
        run: list[Document] = []
        for j, part in enumerate([*message.content, None]):  # None: the end, which closes a last run
            if part is not None and part.type == "file":
                run.append(documents[(i, j)])
                continue
            if run:
                section = attachments_text(run)
                parts.append(ContentPart(type="text", text=f"\n\n{section}" if parts else section))
                run = []
            if part is not None:
                parts.append(part)
        out.append(message.model_copy(update={"content": parts}))
    return out


def with_document_tokens(error: APIError, documents: dict[PartIndex, Document], model: LoadedModel) -> APIError:
    """A context_length_exceeded ``error`` with what each document takes of the prompt, in tokens, naming the
    largest document's part (other errors, or a model that cannot count tokens here, as they are)."""
    if error.code != "context_length_exceeded" or not documents or not model.capabilities.tokenizes:
        return error
    tokens = {index: len(model.tokenizer.encode(d.text, add_special_tokens=False)) for index, d in documents.items()}
    counts = ", ".join(f"{part_field(index)} ('{documents[index].name}') {count:,} tokens"
                       for index, count in tokens.items())
    largest = max(tokens, key=lambda index: tokens[index])
    return APIError(400, f"{error.message}. Of those tokens, the attached documents take {counts}: attach a "
                         "shorter part of the document, or use a model with a longer context",
                    param=part_field(largest), code=error.code)


def _read(field: str, part: FileContent, limits: DocumentLimits) -> Document:
    if part.file_id is not None:
        raise APIError(400, f"{field}: file_id refers to OpenAI's Files API, which this server does not have; send "
                            "the file itself as file_data (data:application/pdf;base64,...) with its filename",
                       param=field, code="file_id_not_supported")
    if part.file_data is None:
        raise APIError(400, f"{field}: a file part needs file_data (the file as base64, e.g. "
                            "data:application/pdf;base64,...) and its filename", param=field, code="invalid_file")
    data, media_type = _file_bytes(field, part.file_data, limits.max_bytes)
    filename = part.filename or _NAME_OF_TYPE.get(media_type) or (
        "document.txt" if media_type.startswith("text/") else None)
    if filename is None:
        raise APIError(400, f"{field}: a file part needs its filename (its extension says how the file is read: "
                            ".pdf, .docx, or text such as .txt, .md, .csv, .py)", param=field, code="invalid_file")
    try:
        return read_document(data, filename, limits)
    except DocumentError as exc:
        raise APIError(400, f"{field}: {exc}", param=field, code="invalid_file") from None


def _file_bytes(field: str, file_data: str, limit: int) -> tuple[bytes, str]:
    """The bytes of ``file_data`` (a base64 data URL, or bare base64) and the data URL's media type ("" for none);
    one over ``limit`` is refused before it is decoded."""
    media_type, payload = "", file_data.strip()
    if payload.startswith("data:"):
        header, comma, payload = payload.partition(",")
        if not comma or not header.lower().endswith(";base64"):
            raise APIError(400, f"{field}: file_data must be base64, as a data URL like "
                                f"data:application/pdf;base64,JVBERi0... or bare; got {header[:40]!r}", param=field,
                           code="invalid_file")
        media_type = header[5:].split(";", 1)[0].strip().lower()
    size = len(payload) * 3 // 4
    if size > limit + 3:
        raise APIError(400, f"{field}: the file is {size / 2**20:.3g} MB, over this server's limit of "
                            f"{limit / 2**20:.3g} MB for an attached document; attach a smaller file or the part you "
                            "need", param=field, code="file_too_large")
    try:
        return base64.b64decode(_SPACE.sub(b"", payload.encode("ascii")), validate=True), media_type
    except (binascii.Error, ValueError) as exc:  # ValueError: a character that is not ASCII
        raise APIError(400, f"{field}: file_data's base64 is invalid: {exc}", param=field,
                       code="invalid_file") from None
