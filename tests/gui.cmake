# GUI suites (QT_QPA_PLATFORM=offscreen via kvscope_add_test).
#   tst_widgets: item models (QAbstractItemModelTester), colour/geometry structs, selection,
#                attention recorder; no model needed.
#   tst_gui:     engine controller flows and the main window on stories260K (label model);
#                writes screenshots of every panel to <build>/screenshots.
#   tst_tour:    the guided tour, every step (label model).
kvscope_add_test(tst_widgets LIBS kvscope::widgets)
kvscope_add_test(tst_gui LIBS kvscope_app LABELS model)
# tst_tour: the guided tour's eight steps in the real window (label model).
kvscope_add_test(tst_tour LIBS kvscope_app LABELS model)
# tst_layout: the window fits 1366x768 and 1600x1000 (children on offscreen screens).
kvscope_add_test(tst_layout LIBS kvscope_app LABELS model)
target_compile_definitions(tst_gui PRIVATE KVSCOPE_CLI="$<TARGET_FILE:kvscope-cli>")
add_dependencies(tst_gui kvscope-cli)
# tst_guiflows: the window against the CLI (verify/diff/drift JSON), a llama.cpp state, restore
# refusals in the real dialog, the lineage rules (label model).
# tst_guiuser: a new user's flow at 1366x768, the huge-pages box, small read-outs, the tour's
# promises (label model).
foreach(suite tst_guiflows tst_guiuser)
  kvscope_add_test(${suite} LIBS kvscope_app LABELS model)
  target_compile_definitions(${suite} PRIVATE KVSCOPE_CLI="$<TARGET_FILE:kvscope-cli>")
  add_dependencies(${suite} kvscope-cli)
endforeach()
# tst_views: the heatmap viewer (raster cost bound, zoom/pan/hover, ticks, empty state) and the
# attention view on stories260K (mouse-driven read-out, GUI == `kvscope-cli attention`).
kvscope_add_test(tst_views LIBS kvscope_app LABELS model)
target_compile_definitions(tst_views PRIVATE KVSCOPE_CLI="$<TARGET_FILE:kvscope-cli>")
add_dependencies(tst_views kvscope-cli)
# tst_survivalpanel: the Survival panel on the bundled demo model through the engine thread,
# held against `kvscope-cli survive --json`; the frontier of a sweep; refusals as messages.
kvscope_add_test(tst_survivalpanel LIBS kvscope_app LABELS model)
target_compile_definitions(tst_survivalpanel PRIVATE KVSCOPE_CLI="$<TARGET_FILE:kvscope-cli>")
add_dependencies(tst_survivalpanel kvscope-cli)
# tst_insightspanel: the Insights panel on the demo model through the engine thread, held
# against `kvscope-cli insights run N --json`; the evidence button; results cleared per model.
kvscope_add_test(tst_insightspanel LIBS kvscope_app LABELS model)
target_compile_definitions(tst_insightspanel PRIVATE KVSCOPE_CLI="$<TARGET_FILE:kvscope-cli>")
add_dependencies(tst_insightspanel kvscope-cli)
