"""Documents that come with prompts (the API's ``file`` parts, the Chat tab's attachments), read as text: a file's
bytes and name become a Document (its name, the SHA-256 of its bytes, its text and its kind), or a DocumentError
that says what is wrong and what to do.

What is read, by the file's extension, and checked against its bytes:

- ``.pdf``: the text layer of each page (pypdf), pages joined by a blank line. A PDF without any text (a scan) is
  refused: run OCR on it, or attach its pages as images. An encrypted PDF is read only when it opens with an empty
  password (restrictions on printing or copying only); one that needs a password is refused.
- ``.docx``: headers, the body's paragraphs and tables in order (a table row's cells joined by tabs), footers
  (python-docx). ``.doc``, ``.odt`` and ``.rtf`` are refused by name: save the document as .docx.
- anything else is text (``.txt``, Markdown, code, CSV, JSON, YAML, logs...): UTF-8 (a BOM is dropped), line ends
  made ``\\n``. Text in another encoding is refused naming the encoding it looks like; bytes that are an image, an
  archive, a spreadsheet or another binary format are refused naming that format, whatever the file is called.

Limits (DocumentLimits): the bytes as sent, the characters of text, a PDF's pages and the time it may take, a
.docx's unzipped size and entries (a zip bomb is refused from its directory, before anything is inflated), and
pypdf's own limits made tighter for each stream a page decompresses (a PDF bomb stops at the first such stream).

How a document reaches the model, as text-generation-webui writes attachments into a user message (modules/chat.py):
after the message's text, a blank line, then ``ATTACHMENTS:`` and for each document::

    <newline>Name: report.pdf
    Contents:

    =====
    <the document's text>
    =====
    <blank line>

so the model reads the file's name, then its text between two ``=====`` lines. The text is never cut: a document
that does not fit the model's context is refused with its token count where the prompt is built.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import re
import struct
import time
import zipfile
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal, Sequence

if TYPE_CHECKING:
    from docx.section import Section
    from docx.table import Table

DocumentKind = Literal["text", "pdf", "docx"]

MAX_DOCUMENT_BYTES = 10 * 2**20  # the largest file read as a document, as sent (a 300-page PDF is a few MB)
# About 250,000 tokens: more than the context of any model this workbench runs, so the limit never refuses a
# document a model could read, and the tokenizer never sees megabytes of text it would refuse after counting.
MAX_DOCUMENT_CHARS = 1_000_000
MAX_PDF_PAGES = 2_000
MAX_READ_SECONDS = 60.0  # for a PDF, checked between pages (each page is bounded by pypdf's stream limits)
MAX_UNZIPPED_BYTES = 100 * 2**20  # a .docx's files, inflated, as its zip directory declares them
MAX_ZIP_ENTRIES = 5_000
# pypdf's limits for one stream (its defaults are 75 MB of output and 2 million operands): a page of text is
# well under a megabyte of drawing operators, and a few thousand operands (a dense page: ~5 a word). pypdf parses
# ~100,000 operands a second on one core, so the operand limit is also how long one hostile page may take.
PDF_STREAM_BYTES = 20 * 2**20
PDF_STREAM_OPERANDS = 300_000

READ_FORMATS = "text (.txt, .md, code, .csv, .json...), PDF and Word .docx files are read"

# Extensions refused by name, with what to do instead (their bytes would not be text).
_REFUSED_EXTENSIONS = {
    ".doc": "an old Word .doc file: save it as .docx (Word, LibreOffice) and attach that",
    ".odt": "an OpenDocument text: save it as .docx and attach that",
    ".rtf": "an RTF document: save it as .docx or plain text and attach that",
    ".xls": "a spreadsheet: save the sheet as .csv and attach that",
    ".xlsx": "a spreadsheet: save the sheet as .csv and attach that",
    ".ods": "a spreadsheet: save the sheet as .csv and attach that",
    ".ppt": "a presentation: export it as PDF and attach that",
    ".pptx": "a presentation: export it as PDF and attach that",
    ".odp": "a presentation: export it as PDF and attach that",
    ".epub": "an e-book: export it as PDF or text and attach that",
}
# Formats known by their first bytes, which are never text.
_MAGIC = ((b"%PDF-", "a PDF"), (b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "a zip archive"),
          (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
          (b"BM", "a BMP image"), (b"II*\x00", "a TIFF image"), (b"MM\x00*", "a TIFF image"),
          (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office file (.doc, .xls or .ppt)"),
          (b"{\\rtf", "an RTF document"), (b"\x1f\x8b", "a gzip archive"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
          (b"Rar!", "a RAR archive"), (b"\x7fELF", "a program (ELF)"), (b"MZ", "a Windows program"),
          (b"\x00asm", "a WebAssembly module"), (b"SQLite format 3\x00", "an SQLite database"))
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
         (codecs.BOM_UTF16_BE, "UTF-16"))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_IN_MEMORY = re.compile(r"file '<_io\.BytesIO object at 0x[0-9a-fA-F]+>'")


class DocumentError(ValueError):
    """A file that cannot be read as a document: over a limit, in a format not read, corrupt, or encrypted."""


@dataclass(frozen=True)
class Document:
    """A file read as text, as the model reads it."""

    name: str  # the file's name, without folders and control characters ("report.pdf")
    digest: str  # SHA-256 of the file's bytes: one stored copy per content
    text: str  # what goes into the message (never cut)
    kind: DocumentKind  # how it was read: "text", "pdf" or "docx"


@dataclass(frozen=True)
class DocumentLimits:
    max_bytes: int = MAX_DOCUMENT_BYTES
    max_chars: int = MAX_DOCUMENT_CHARS
    max_pages: int = MAX_PDF_PAGES
    max_seconds: float = MAX_READ_SECONDS
    max_unzipped_bytes: int = MAX_UNZIPPED_BYTES
    max_zip_entries: int = MAX_ZIP_ENTRIES


def document_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def document_name(filename: str) -> str:
    """``filename`` as a document is named: its last path component, control characters (a newline that would
    start a line of its own in the prompt) made spaces, at most 255 characters."""
    base = re.split(r"[/\\]", filename)[-1]
    return _CONTROL.sub(" ", base).strip()[:255]


def document_kind(filename: str) -> DocumentKind:
    """How a file of this name is read; a DocumentError for a format that is refused by its extension."""
    suffix = os.path.splitext(document_name(filename))[1].lower()
    if suffix in _REFUSED_EXTENSIONS:
        raise DocumentError(f"'{document_name(filename)}' is {_REFUSED_EXTENSIONS[suffix]}")
    return "pdf" if suffix == ".pdf" else "docx" if suffix == ".docx" else "text"


def read_document(data: bytes, filename: str, limits: DocumentLimits = DocumentLimits()) -> Document:
    """``data`` (a file's bytes) read as text, by the kind ``filename``'s extension says and its bytes confirm."""
    name = document_name(filename)
    if not name:
        raise DocumentError(f"the file needs a name, whose extension says how to read it; {READ_FORMATS}")
    if len(data) > limits.max_bytes:
        raise DocumentError(f"'{name}' is {_mb(len(data))}, over the limit of {_mb(limits.max_bytes)} for an "
                            "attached document; attach a smaller file or a part of it")
    kind = document_kind(name)
    if kind == "pdf":
        text = _pdf_text(data, name, limits)
    elif kind == "docx":
        text = _docx_text(data, name, limits)
    else:
        text = _plain_text(data, name)
    if len(text) > limits.max_chars:
        raise DocumentError(_too_long(name, f"has {len(text):,} characters of text", limits))
    return Document(name, document_digest(data), text, kind)


def attachments_text(documents: Sequence[Document]) -> str:
    """text-generation-webui's ATTACHMENTS section for ``documents``: each one's name, then its text between two
    ``=====`` lines."""
    blocks = "".join(f"\nName: {d.name}\nContents:\n\n=====\n{d.text}\n=====\n\n" for d in documents)
    return f"ATTACHMENTS:\n{blocks}"


def with_documents(text: str, documents: Sequence[Document]) -> str:
    """A user message's ``text`` with ``documents`` after it, as text-generation-webui writes them."""
    if not documents:
        return text
    return f"{text}\n\n{attachments_text(documents)}" if text else attachments_text(documents)


def _mb(size: int) -> str:
    return f"{size / 2**20:.3g} MB"


def _too_long(name: str, what: str, limits: DocumentLimits) -> str:
    return (f"'{name}' {what}, over the limit of {limits.max_chars:,} characters for an attached document (more "
            "than a model's context holds); attach the part you need")


def sniffed_format(data: bytes) -> str | None:
    """What ``data`` is, in words ("a PNG image"), when its first bytes name a binary format; else None."""
    head = data[:1024]
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "a WebP image"
    if b"%PDF-" in head:  # the PDF header may follow up to 1 KB of junk
        return "a PDF"
    return next((what for magic, what in _MAGIC if head.startswith(magic)), None)


def _not_what_it_says(name: str, expected: str, data: bytes) -> DocumentError:
    found = sniffed_format(data) or ("plain text" if _is_utf8(data[:4096]) else "in another format")
    return DocumentError(f"'{name}' is not {expected}: its bytes are {found}; give the file the extension of what it "
                         f"is ({READ_FORMATS})")


def _is_utf8(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut at the end of ``head``
    return b"\x00" not in head


# --- text ----------------------------------------------------------------------------------------------------------

def _plain_text(data: bytes, name: str) -> str:
    for bom, encoding in _BOMS:  # UTF-32's byte order marks start with UTF-16's: they are tried first
        if data.startswith(bom):
            raise DocumentError(f"'{name}' is {encoding} text; save it as UTF-8 and attach it again")
    found = sniffed_format(data)
    if found:
        hint = " (attach it as an image)" if found.endswith("image") else ""
        raise DocumentError(f"'{name}' is not text: its bytes are {found}{hint}; {READ_FORMATS}")
    if b"\x00" in data:
        raise DocumentError(f"'{name}' is not text: it holds NUL bytes (a binary file, or UTF-16 text without a "
                            f"byte order mark: save it as UTF-8); {READ_FORMATS}")
    try:
        text = data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"'{name}' is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); it "
                            f"looks like {_encoding_guess(data)}: save it as UTF-8 and attach it again") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _encoding_guess(data: bytes) -> str:
    """The encoding ``data`` (not UTF-8) most likely is, in words."""
    from charset_normalizer import from_bytes

    best = from_bytes(data[:65536]).best()
    if best is None:
        return "no text encoding (a binary file?)"
    languages = [language for language in best.languages[:2] if language != "Unknown"]
    return f"{best.encoding} text" + (f" ({', '.join(languages)})" if languages else "")


# --- PDF -----------------------------------------------------------------------------------------------------------

def _pdf_text(data: bytes, name: str, limits: DocumentLimits) -> str:
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import DependencyError, LimitReachedError, PyPdfError

    if b"%PDF-" not in data[:1024]:
        raise _not_what_it_says(name, "a PDF", data)
    started = time.monotonic()
    pages: list[str] = []
    chars = 0
    # tighter than pypdf's defaults, for this read only (a context variable: no global is changed)
    with apply_configuration(zlib_maximum_output_length=PDF_STREAM_BYTES, lzw_maximum_output_length=PDF_STREAM_BYTES,
                             run_length_maximum_output_length=PDF_STREAM_BYTES,
                             brotli_maximum_output_length=PDF_STREAM_BYTES,
                             array_based_stream_maximum_output_length=PDF_STREAM_BYTES,
                             stream_parsing_work_maximum_count=PDF_STREAM_OPERANDS):
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise DocumentError(f"'{name}' is a password-protected PDF; save a copy without the password (print "
                                    "it to PDF, or remove the protection in your PDF reader) and attach that")
            count = len(reader.pages)
            if count > limits.max_pages:
                raise DocumentError(f"'{name}' has {count:,} pages, over the limit of {limits.max_pages:,} for an "
                                    "attached PDF; attach the pages you need (print them to a new PDF)")
            for number, page in enumerate(reader.pages, 1):
                if time.monotonic() - started > limits.max_seconds:
                    raise DocumentError(f"reading '{name}' took over {limits.max_seconds:g} s (stopped at page "
                                        f"{number} of {count}); attach fewer pages, or save it as text")
                text = page.extract_text().strip()
                chars += len(text)
                if chars > limits.max_chars:
                    raise DocumentError(_too_long(name, f"has over {limits.max_chars:,} characters of text by page "
                                                        f"{number} of {count}", limits))
                pages.append(text)
        except DocumentError:
            raise
        except DependencyError as exc:  # AES encryption needs the cryptography package
            raise DocumentError(f"'{name}' is encrypted in a way that needs another package to read ({exc}); save "
                                "a copy without encryption and attach that") from None
        except LimitReachedError as exc:
            raise DocumentError(f"'{name}' is over a limit on what one PDF page may unpack or hold ({exc}): a PDF "
                                "bomb, or a page far larger than text needs; attach the pages you need") from None
        except PyPdfError as exc:  # pypdf's own: corrupt or truncated
            raise DocumentError(f"'{name}' could not be read as a PDF (corrupt or truncated?): {exc}") from None
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, AssertionError, RecursionError,
                OverflowError, struct.error, zlib.error) as exc:  # what malformed objects raise inside pypdf
            raise DocumentError(f"'{name}' could not be read as a PDF (a corrupt or truncated file?): "
                                f"{type(exc).__name__}: {exc}") from None
    text = "\n\n".join(p for p in pages if p)
    if not text:
        raise DocumentError(f"'{name}' has no text layer (a scanned PDF?): run text recognition (OCR) on it, or "
                            "attach its pages as images to a model that takes images")
    return text


# --- .docx ---------------------------------------------------------------------------------------------------------

def _docx_text(data: bytes, name: str, limits: DocumentLimits) -> str:
    _check_docx_zip(data, name, limits)
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import LxmlError

    try:
        document = docx.Document(io.BytesIO(data))
        parts = _margin_texts(document.sections, "header")
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                parts.extend(_table_rows(block))
            else:
                parts.append(block.text.strip())
        parts += _margin_texts(document.sections, "footer")
    except (zipfile.BadZipFile, PackageNotFoundError, LxmlError, KeyError, ValueError, TypeError, AttributeError,
            IndexError, EOFError, zlib.error, NotImplementedError) as exc:  # a corrupt package, inside python-docx
        detail = _IN_MEMORY.sub("it", str(exc))  # python-docx names the file by its repr
        raise DocumentError(f"'{name}' could not be read as a Word .docx file (corrupt or truncated, or another kind "
                            f"of Office file?): {type(exc).__name__}: {detail}") from None
    return "\n".join(p for p in parts if p)


def _check_docx_zip(data: bytes, name: str, limits: DocumentLimits) -> None:
    """Refuse a .docx that is no Word document, or whose zip directory declares more than the limits allow
    (zipfile never inflates past an entry's declared size, so this bounds what reading it unpacks)."""
    if not data.startswith(b"PK\x03\x04"):
        raise _not_what_it_says(name, "a Word .docx file", data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError, struct.error) as exc:
        raise DocumentError(f"'{name}' could not be read as a Word .docx file (a corrupt or truncated zip?): "
                            f"{exc}") from None
    if len(entries) > limits.max_zip_entries:
        raise DocumentError(f"'{name}' holds {len(entries):,} files, over the limit of {limits.max_zip_entries:,} "
                            "for a .docx; save it again from Word or LibreOffice and attach that")
    unzipped = sum(e.file_size for e in entries)
    if unzipped > limits.max_unzipped_bytes:
        raise DocumentError(f"'{name}' unpacks to {_mb(unzipped)}, over the limit of {_mb(limits.max_unzipped_bytes)} "
                            "for a .docx (a zip bomb, or very large pictures): save a copy without the pictures, or "
                            "as PDF, and attach that")
    names = {e.filename for e in entries}
    if "word/document.xml" not in names:
        found = ("an Excel workbook" if "xl/workbook.xml" in names else "a PowerPoint presentation"
                 if "ppt/presentation.xml" in names else "an OpenDocument file" if "mimetype" in names
                 else "a zip archive of other files")
        raise DocumentError(f"'{name}' is not a Word .docx file: it is {found}; {READ_FORMATS}")


def _table_rows(table: Table) -> list[str]:
    """Each row of a table as its cells' text joined by tabs (a cell merged across columns once)."""
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:  # a merged cell comes once per column it spans, with the same XML element
            if id(cell._tc) not in seen:
                seen.add(id(cell._tc))
                cells.append(cell.text.strip())
        rows.append("\t".join(cells))
    return rows


def _margin_texts(sections: Iterable[Section], which: Literal["header", "footer"]) -> list[str]:
    """The paragraphs of each section's own header or footer (one linked to the previous section's is that one, and
    a section without one has none: asking for its paragraphs would make one)."""
    texts = []
    for section in sections:
        margin = section.header if which == "header" else section.footer
        if not margin.is_linked_to_previous:
            texts += [p.text.strip() for p in margin.paragraphs]
    return list(dict.fromkeys(texts))
