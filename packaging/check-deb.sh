#!/usr/bin/env bash
# Builds the kvscope .deb from a configured build directory and checks it: the contents list
# (binaries, desktop entry, icon, AppStream metainfo, the demo model when the source tree has
# one), the control fields, the desktop file and metainfo validators, that no binary carries
# an RPATH into the build tree, and that the packaged kvscope-cli finds the packaged demo model
# with no source tree around. Run by CTest (tests/package.cmake, label `package`); runnable by
# hand. Writes only under <build>/package-test.
# Usage: check-deb.sh --source-dir DIR --build-dir DIR --version X.Y.Z --gui ON|OFF
#                     [--cpack PATH] [--cmake PATH]
# Exit: 0 all checks pass, 1 a check failed (each failure is printed), 2 usage.
set -uo pipefail

SRC="" BUILD="" VERSION="" GUI="" CPACK=cpack CMAKE=cmake
while [ $# -gt 0 ]; do
  case "$1" in
    --source-dir) SRC="$2"; shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --version) VERSION="$2"; shift 2 ;;
    --gui) GUI="$2"; shift 2 ;;
    --cpack) CPACK="$2"; shift 2 ;;
    --cmake) CMAKE="$2"; shift 2 ;;
    *) echo "check-deb: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$SRC" ] || [ -z "$BUILD" ] || [ -z "$VERSION" ] || [ -z "$GUI" ]; then
  echo "usage: check-deb.sh --source-dir DIR --build-dir DIR --version X.Y.Z --gui ON|OFF" >&2
  exit 2
fi
SRC="$(realpath "$SRC")"
BUILD="$(realpath "$BUILD")"

APP_ID=org.kvscope.kvscope
# The files of a Hugging Face model folder the demo model must ship with.
DEMO_REQUIRED=(config.json model.safetensors tokenizer.json tokenizer_config.json
               generation_config.json README.md)

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok:   $*"; }
need_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "check-deb: '$1' not found; install package $2 (packaging/install-deps.sh does)" >&2
  exit 1
}
need_tool dpkg-deb dpkg
need_tool dpkg-shlibdeps dpkg-dev
need_tool readelf binutils
need_tool desktop-file-validate desktop-file-utils
need_tool appstreamcli appstream
need_tool jq jq

# 1. The binaries the package installs must be current (a no-op after a full build).
targets=(kvscope-cli)
[ "$GUI" = ON ] && targets+=(kvscope)
if ! "$CMAKE" --build "$BUILD" --target "${targets[@]}"; then
  echo "check-deb: building ${targets[*]} failed" >&2
  exit 1
fi

# 2. cpack into a directory of our own.
OUT="$BUILD/package-test"
rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)
if ! "$CPACK" -G DEB --config "$BUILD/CPackConfig.cmake" -B "$OUT" >"$OUT/cpack.log" 2>&1; then
  cat "$OUT/cpack.log"
  echo "check-deb: cpack failed" >&2
  exit 1
fi
shopt -s nullglob
debs=("$OUT"/kvscope_"$VERSION"_*.deb)
shopt -u nullglob
if [ ${#debs[@]} -ne 1 ]; then
  cat "$OUT/cpack.log"
  echo "check-deb: expected one kvscope_${VERSION}_*.deb in $OUT, found ${#debs[@]}" >&2
  exit 1
fi
DEB="${debs[0]}"
echo "check-deb: built $(basename "$DEB") ($(du -h "$DEB" | cut -f1)) in $(($(date +%s) - start)) s"

# 3. Contents list.
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|/$||' >"$OUT/contents.txt"
has() { grep -qxF "./$1" "$OUT/contents.txt"; }
expected=(usr/bin/kvscope-cli usr/share/doc/kvscope/copyright)
if [ "$GUI" = ON ]; then
  expected+=(usr/bin/kvscope
             "usr/share/applications/$APP_ID.desktop"
             usr/share/icons/hicolor/scalable/apps/kvscope.svg
             "usr/share/metainfo/$APP_ID.metainfo.xml")
fi
demo_src="$SRC/resources/demo-model"
demo_files=()
# The model-folder files of the source tree: the install rule's patterns in
# cmake/KvscopePackaging.cmake (not sample.txt, not the trainer's checkpoint state).
TRAINER_STATE=(optimizer.safetensors weights_f32.safetensors trainer_state.json)
if [ -d "$demo_src" ]; then
  while IFS= read -r f; do demo_files+=("$f"); done < <(
    cd "$demo_src" && find . -maxdepth 1 -type f \( -name '*.json' -o -name '*.safetensors' \
      -o -name 'README*' -o -name 'LICENSE*' -o -name 'COPYING*' \) \
      ! -name optimizer.safetensors ! -name weights_f32.safetensors ! -name trainer_state.json \
      -printf '%P\n' | sort)
fi
if [ ${#demo_files[@]} -gt 0 ]; then
  # Once the source tree has a demo model, the package must carry all of it.
  for f in "${DEMO_REQUIRED[@]}"; do expected+=("usr/share/kvscope/demo-model/$f"); done
  for f in "${demo_files[@]}"; do expected+=("usr/share/kvscope/demo-model/$f"); done
else
  echo "check-deb: no demo model in $demo_src yet: not required in the package"
fi
while IFS= read -r p; do
  if has "$p"; then ok "contains /$p"; else fail "the package lacks /$p"; fi
done < <(printf '%s\n' "${expected[@]}" | awk '!seen[$0]++')
for f in "${TRAINER_STATE[@]}"; do
  has "usr/share/kvscope/demo-model/$f" && fail "the package carries training state demo-model/$f"
done
# Nothing but the binaries and data under /usr/share (no headers, static libraries, /usr/local).
stray=$(grep -v -E '^\./(usr(/bin(/kvscope(-cli)?)?|/share(/(kvscope|applications|icons|metainfo|doc)(/.*)?)?)?)?$' \
  "$OUT/contents.txt" || true)
if [ -n "$stray" ]; then fail "unexpected paths in the package: $(echo "$stray" | tr '\n' ' ')"; fi

# 4. Control fields.
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = kvscope ] && ok "Package: kvscope" || fail "Package is '$(field Package)', not kvscope"
[ "$(field Version)" = "$VERSION" ] && ok "Version: $VERSION" ||
  fail "Version is '$(field Version)', the project's is $VERSION"
arch=$(dpkg --print-architecture)
[ "$(field Architecture)" = "$arch" ] && ok "Architecture: $arch" ||
  fail "Architecture is '$(field Architecture)', not $arch"
[ "$(field Section)" = science ] && ok "Section: science" || fail "Section is '$(field Section)', not science"
[ -n "$(field Maintainer)" ] && ok "Maintainer: $(field Maintainer)" || fail "Maintainer is empty"
[ -n "$(field Description)" ] && ok "Description present" || fail "Description is empty"
depends=$(field Depends)
echo "      Depends: $depends"
if [ -z "$depends" ]; then
  fail "Depends is empty (dpkg-shlibdeps found nothing)"
else
  grep -qE '(^|, )libtorch[0-9.]+' <<<"$depends" && ok "Depends names libtorch" ||
    fail "Depends does not name the libtorch runtime package"
  if [ "$GUI" = ON ]; then
    grep -qE '(^|, )libqt6widgets6' <<<"$depends" && ok "Depends names Qt 6 (libqt6widgets6)" ||
      fail "Depends does not name Qt 6 Widgets (libqt6widgets6)"
    grep -qE '(^|, )libqcustomplot[0-9.]+-qt6' <<<"$depends" && ok "Depends names QCustomPlot (Qt 6)" ||
      fail "Depends does not name the Qt 6 QCustomPlot runtime package"
  fi
fi

# 5. Unpack: validators, metainfo release, RPATH, the relocated CLI.
ROOT="$OUT/root"
dpkg-deb -x "$DEB" "$ROOT"
if [ "$GUI" = ON ]; then
  desktop="$ROOT/usr/share/applications/$APP_ID.desktop"
  metainfo="$ROOT/usr/share/metainfo/$APP_ID.metainfo.xml"
  if [ -f "$desktop" ]; then
    if msg=$(desktop-file-validate "$desktop" 2>&1) && [ -z "$msg" ]; then
      ok "desktop-file-validate $APP_ID.desktop"
    else
      fail "desktop-file-validate $APP_ID.desktop: $msg"
    fi
    exec_bin=$(sed -n 's/^Exec=\([^ ]*\).*/\1/p' "$desktop")
    [ -x "$ROOT/usr/bin/$exec_bin" ] && ok "Exec=$exec_bin is in /usr/bin" ||
      fail "$APP_ID.desktop: Exec=$exec_bin is not a packaged binary"
    icon=$(sed -n 's/^Icon=//p' "$desktop")
    [ -f "$ROOT/usr/share/icons/hicolor/scalable/apps/$icon.svg" ] && ok "Icon=$icon is packaged" ||
      fail "$APP_ID.desktop: Icon=$icon has no file in the hicolor theme"
  fi
  if [ -f "$metainfo" ]; then
    if msg=$(appstreamcli validate --no-net "$metainfo" 2>&1); then
      ok "appstreamcli validate $APP_ID.metainfo.xml"
    else
      fail "appstreamcli validate $APP_ID.metainfo.xml: $msg"
    fi
    newest=$(grep -o '<release [^>]*version="[^"]*"' "$metainfo" | head -n1 | sed 's/.*version="\([^"]*\)"/\1/')
    [ "$newest" = "$VERSION" ] && ok "metainfo's newest release is $VERSION" ||
      fail "$APP_ID.metainfo.xml: newest <release> is '$newest', the project's version is $VERSION"
  fi
fi
for b in "${targets[@]}"; do
  f="$ROOT/usr/bin/$b"
  [ -f "$f" ] || continue
  paths=$(readelf -d "$f" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p')
  bad=$(tr ':' '\n' <<<"$paths" | grep -v -E '^$|^\$ORIGIN' || true)
  [ -z "$bad" ] && ok "$b has no RPATH/RUNPATH outside \$ORIGIN" ||
    fail "$b has RPATH/RUNPATH $paths (it must not point into the build tree)"
done
for f in "${demo_files[@]}"; do
  cmp -s "$demo_src/$f" "$ROOT/usr/share/kvscope/demo-model/$f" ||
    fail "demo-model/$f in the package differs from the source tree's"
done
if [ ${#demo_files[@]} -gt 0 ] && [ -f "$ROOT/usr/share/kvscope/demo-model/config.json" ]; then
  # The packaged CLI alone, run from a directory unrelated to the source tree, with no model
  # argument: it must find <exe>/../share/kvscope/demo-model.
  cli="$ROOT/usr/bin/kvscope-cli"
  # stdout is the JSON; stderr (a "using the bundled demo model" note, errors) goes aside.
  if info=$(cd / && env -u KVSCOPE_DEMO_MODEL "$cli" info --json 2>"$OUT/cli.err"); then
    want=$(realpath "$ROOT/usr/share/kvscope/demo-model")
    got=$(jq -r '.path // empty' <<<"$info" 2>/dev/null)
    [ -n "$got" ] && [ "$(realpath -m "$got")" = "$want" ] && ok "packaged kvscope-cli info uses $want" ||
      fail "packaged kvscope-cli info --json used model path '$got', not $want"
  else
    fail "packaged kvscope-cli info --json (no --model) failed: $info $(cat "$OUT/cli.err")"
  fi
  if gen=$(cd / && env -u KVSCOPE_DEMO_MODEL "$cli" generate --steps 20 --temperature 0 --json \
             2>"$OUT/cli.err") &&
     [ "$(jq '.tokens | length' <<<"$gen" 2>/dev/null)" -gt 0 ] 2>/dev/null; then
    ok "packaged kvscope-cli generate --steps 20 (no --model)"
  else
    fail "packaged kvscope-cli generate --steps 20 (no --model) failed: $gen $(cat "$OUT/cli.err")"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "check-deb: $failures check(s) failed for $(basename "$DEB")"
  exit 1
fi
echo "check-deb: $(basename "$DEB") passed"
