"""Reports people look at: a static, self-contained HTML site built from the JSON documents
nodeforge already writes (the pipeline's run record, the enrollment report), never from anything
else, so a page cannot say what the data does not (:mod:`.documents` finds and reads them,
:mod:`.site` renders them)."""
