app_name = "checkpoints"

urlpatterns = []
