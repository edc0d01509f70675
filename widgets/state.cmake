# The state-ledger half of kvscope_widgets: the ledger controller/worker and the panels that
# need core/state (validation, snapshots & fork tree, drift, diff, transplant, induction).
target_sources(kvscope_widgets PRIVATE
  diffpanel.cpp
  driftpanel.cpp
  inductionpanel.cpp
  ledgercontroller.cpp
  ledgerworker.cpp
  snapshotpanel.cpp
  transplantmodel.cpp
  transplantpanel.cpp
  validationpanel.cpp
)
target_link_libraries(kvscope_widgets PUBLIC kvscope::state)
target_compile_definitions(kvscope_widgets PUBLIC KVSCOPE_HAVE_STATE=1)
