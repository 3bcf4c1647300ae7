"""Small real documents for tests, made here: PDFs written object by object (pages of Helvetica text, or any
content streams), Word .docx files written by python-docx, and zips of chosen entries."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib


def _escaped(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_stream(text: str) -> bytes:
    """Drawing operators that write ``text`` (Latin-1) on a page, a line per line, in 12 pt Helvetica."""
    lines = " ".join(f"({_escaped(line)}) Tj T*" for line in text.split("\n"))
    return f"BT /F1 12 Tf 72 720 Td 14 TL {lines} ET".encode("latin-1")


def pdf_of_streams(streams: list[bytes], flate: bool = False, page_refs: int | None = None,
                   trailer_extra: str = "") -> bytes:
    """A PDF with one page per content stream (each deflated with ``flate``); ``page_refs``: the page tree lists the
    first page that many times instead (a small file with many pages)."""
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
                                      b"/Encoding /WinAnsiEncoding >>"]
    kids = []
    for stream in streams:
        data = zlib.compress(stream) if flate else stream
        filters = b" /Filter /FlateDecode" if flate else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(data), filters) + data + b"\nendstream")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 3 0 R >> >> >>" % len(objects))
        kids.append(len(objects))
    if page_refs is not None:
        kids = kids[:1] * page_refs
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, trailer_extra.encode(), xref)
    return bytes(out)


def pdf_bytes(*pages: str) -> bytes:
    """A PDF whose pages hold these texts (Latin-1, lines split at newlines)."""
    return pdf_of_streams([text_stream(page) for page in pages], flate=True)


def encrypted_pdf(data: bytes, user_password: str, owner_password: str = "owner") -> bytes:
    """``data`` (a PDF) encrypted with pypdf's own RC4 (no other package needed)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password, owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(*paragraphs: str, table: list[list[str]] | None = None, header: str | None = None,
               footer: str | None = None) -> bytes:
    """A Word .docx of these paragraphs, then ``table`` (rows of cells), with a header and footer if given."""
    import docx

    document = docx.Document()
    if header is not None:
        document.sections[0].header.paragraphs[0].text = header
    if footer is not None:
        document.sections[0].footer.paragraphs[0].text = footer
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                grid.cell(r, c).text = cell
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def replaced_in_zip(data: bytes, entries: dict[str, bytes]) -> bytes:
    """``data`` (a zip, e.g. a .docx) with these entries' contents replaced or added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename not in entries:
                target.writestr(info, source.read(info))
        for name, body in entries.items():
            target.writestr(name, body)
    return out.getvalue()


def with_declared_size(data: bytes, entry: str, size: int) -> bytes:
    """``data`` (a zip) with ``entry``'s uncompressed size written as ``size`` in both of its headers: a zip whose
    directory lies about what an entry inflates to."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(entry)
    out = bytearray(data)
    struct.pack_into("<I", out, info.header_offset + 22, size)  # the local file header
    central = out.find(b"PK\x01\x02")
    while central != -1:  # the central directory's entry for the same file (by its name)
        name_length = struct.unpack_from("<H", out, central + 28)[0]
        if out[central + 46:central + 46 + name_length] == entry.encode():
            struct.pack_into("<I", out, central + 24, size)
            break
        central = out.find(b"PK\x01\x02", central + 4)
    return bytes(out)
