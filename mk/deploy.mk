# Deployment: systemd integration tests, install, Debian packages, lint.

TESTS += test_deploy

# devqd with test-only fault hooks (tests/deploy/faults.c) wrapped around
# the loop and the completion path; the installed devqd has none of them.
$(BUILD)/tests/devqd-faults: $(call obj,tests/deploy/faults.c) $(DAEMON_OBJ) $(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -Wl,--wrap=devq_server_run,--wrap=devq_on_complete -o $@ $^ \
	  $(LIBS_UV) $(LIBS_PB) $(LIBS_SD) -lm

$(BUILD)/tests/test_deploy: $(call obj,tests/test_deploy.c) $(call obj,tests/harness.c) $(KERNEL_OBJ) $(BUILD)/libdevq.a $(BUILD)/tests/devqd-faults
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -o $@ $(filter %.o %.a,$^) $(LIBS_PB) $(LIBS_CK) -lm
