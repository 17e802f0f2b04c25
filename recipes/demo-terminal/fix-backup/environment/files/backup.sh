#!/bin/bash
# Archive every .txt file under the directory $1 into the gzipped tarball $2.
set -e
src=$1
out=$2
tar -czf $out $(find $src -name '*.txt')
