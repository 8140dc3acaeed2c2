"""Small real PDF and DOCX files written from text (no binary fixtures).

For the generated notices site and the tests of document text: each file is made from
its words.

``pdf_file`` writes a PDF 1.4 with one page per item of ``pages`` (Helvetica, a line of
text each), its cross-reference table at the right offsets, as any reader expects.
``docx_file`` writes the three parts a WordprocessingML package needs.
"""

import io
import zipfile


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def pdf_file(pages: list[list[str]], title: str = "") -> bytes:
    """A PDF whose page n shows the lines of ``pages[n]`` (Latin-1 text)."""
    count = len(pages)
    kids = " ".join(f"{4 + 2 * n} 0 R" for n in range(count))
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {count} >>",
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for n, lines in enumerate(pages):
        shown = " ".join(f"{_pdf_string(line)} Tj T*" for line in lines)
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * n} 0 R >>")
        objects.append(f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\n"
                       f"endstream")
    if title:
        objects.append(f"<< /Title {_pdf_string(title)} >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1"))
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    info = f" /Info {len(objects)} 0 R" if title else ""
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\n"
              f"startxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>')
_RELATIONSHIPS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>')
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def docx_file(paragraphs: list[str]) -> bytes:
    """A DOCX of one paragraph per item of ``paragraphs`` (any Unicode text)."""
    body = "".join(f"<w:p><w:r><w:t xml:space=\"preserve\">{_escape(text)}</w:t></w:r></w:p>"
                   for text in paragraphs)
    document = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                f'<w:document xmlns:w="{_W}"><w:body>{body}</w:body></w:document>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELATIONSHIPS)
        archive.writestr("word/document.xml", document)
    return out.getvalue()
