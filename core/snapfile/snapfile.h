// The .kvsnap snapshot container: a JSON manifest plus named, checksummed, zstd-compressed
// tensor blobs, in one self-describing file. Layout: core/snapfile/FORMAT.md.
// Qt-free and torch-free; the state ledger builds on top of it.
#pragma once

#include "snapfile/blobinfo.h"
#include "snapfile/dtype.h"
#include "snapfile/reader.h"
#include "snapfile/writer.h"
