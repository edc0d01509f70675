# kvscope_widgets: the panels, item models and the engine controller of the GUI. Links the
# engine through its torch-free public headers only.
add_library(kvscope_widgets STATIC
  attentionpanel.cpp
  attentionrecorder.cpp
  colorscale.cpp
  csv.cpp
  enginecontroller.cpp
  engineworker.cpp
  exportmenu.cpp
  heatmapplot.cpp
  kvheatmappanel.cpp
  kvsummary.cpp
  maskpanel.cpp
  positionalignment.cpp
  positionmodel.cpp
  positionpanel.cpp
  promptbuilder.cpp
  selection.cpp
  sessionpanel.cpp
  snapshottreemodel.cpp
  statepicker.cpp
  tokenmodel.cpp
  tokenstrip.cpp
  violationmodel.cpp
)
add_library(kvscope::widgets ALIAS kvscope_widgets)
target_include_directories(kvscope_widgets PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(kvscope_widgets
  PUBLIC Qt6::Widgets Qt6::PrintSupport QCustomPlotQt6::QCustomPlotQt6 kvscope::core
  PRIVATE kvscope::chat kvscope::compile_options)

# The state ledger panels (validation, snapshots, drift, diff) join once core/state exists.
if(TARGET kvscope_state AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/state.cmake)
  include(${CMAKE_CURRENT_SOURCE_DIR}/state.cmake)
endif()
