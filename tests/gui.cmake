# GUI suites (QT_QPA_PLATFORM=offscreen via kvscope_add_test).
#   tst_widgets: item models (QAbstractItemModelTester), colour/geometry structs, selection,
#                attention recorder; no model needed.
#   tst_gui:     engine controller flows and the main window on stories260K (label model);
#                writes screenshots of every panel to <build>/screenshots.
if(TARGET kvscope_widgets)
  kvscope_add_test(tst_widgets LIBS kvscope::widgets)
endif()
if(TARGET kvscope_app)
  kvscope_add_test(tst_gui LIBS kvscope_app LABELS model)
endif()
